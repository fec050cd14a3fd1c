# Chat templates (issue 11): every family against its published template,
# bad input, and a model carrying its own template. Public API only, so it
# runs against both libraries.
fx_add_test(test_chat SOURCES test_chat.c test_chat_templates.c)
