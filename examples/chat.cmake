# Chat templates: print the prompt a template renders for a conversation.
fx_add_example(ferrox-chat-template ferrox-chat-template.c)
