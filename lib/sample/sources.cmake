list(APPEND FX_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/sample.c
  ${CMAKE_CURRENT_LIST_DIR}/lazy.c
  ${CMAKE_CURRENT_LIST_DIR}/grammar_parse.c
  ${CMAKE_CURRENT_LIST_DIR}/grammar_match.c
  ${CMAKE_CURRENT_LIST_DIR}/grammar_index.c
  ${CMAKE_CURRENT_LIST_DIR}/grammar_trie.c
  ${CMAKE_CURRENT_LIST_DIR}/json_doc.c
  ${CMAKE_CURRENT_LIST_DIR}/json_schema.c
  ${CMAKE_CURRENT_LIST_DIR}/json_schema_num.c
  ${CMAKE_CURRENT_LIST_DIR}/json_schema_obj.c
  ${CMAKE_CURRENT_LIST_DIR}/json_schema_regex.c
  ${CMAKE_CURRENT_LIST_DIR}/tools.c
  ${CMAKE_CURRENT_LIST_DIR}/../api/api_schema.c
  ${CMAKE_CURRENT_LIST_DIR}/../api/api_tools.c)
