# Chat templates: recognition and rendering (lib/chat), and their public
# entry points, which live with the other api files but are listed here so
# that the chat area is added or removed as one piece.
list(APPEND FX_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/chat.c
  ${CMAKE_CURRENT_LIST_DIR}/chat_render.c
  ${CMAKE_CURRENT_LIST_DIR}/jinja_builtins.c
  ${CMAKE_CURRENT_LIST_DIR}/jinja_eval.c
  ${CMAKE_CURRENT_LIST_DIR}/jinja_filters.c
  ${CMAKE_CURRENT_LIST_DIR}/jinja_json.c
  ${CMAKE_CURRENT_LIST_DIR}/jinja_lex.c
  ${CMAKE_CURRENT_LIST_DIR}/jinja_parse.c
  ${CMAKE_CURRENT_LIST_DIR}/jinja_render.c
  ${CMAKE_CURRENT_LIST_DIR}/jinja_value.c
  ${CMAKE_CURRENT_LIST_DIR}/../api/api_chat.c)
