# Tokenizer: vocabulary loading, SentencePiece and BPE, pre-tokenizers over
# utf8proc's Unicode categories; the public entry points live with the
# other api files but are listed here so the area is added as one piece.
set(_fx_tokenizer_sources
  ${CMAKE_CURRENT_LIST_DIR}/vocab.c
  ${CMAKE_CURRENT_LIST_DIR}/pretok.c
  ${CMAKE_CURRENT_LIST_DIR}/regex.c
  ${CMAKE_CURRENT_LIST_DIR}/tokenize.c
  ${CMAKE_CURRENT_LIST_DIR}/decode.c
  ${CMAKE_CURRENT_LIST_DIR}/../api/api_tokenize.c)
list(APPEND FX_SOURCES ${_fx_tokenizer_sources})

# utf8proc: through pkg-config (libutf8proc.pc) where present, else
# find_library/find_path.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(FX_UTF8PROC QUIET libutf8proc)
endif()
if(FX_UTF8PROC_FOUND)
  set(_fx_utf8proc_libs ${FX_UTF8PROC_LINK_LIBRARIES})
  set(_fx_utf8proc_incs ${FX_UTF8PROC_INCLUDE_DIRS})
else()
  find_library(FX_UTF8PROC_LIBRARY utf8proc REQUIRED)
  find_path(FX_UTF8PROC_INCLUDE_DIR utf8proc.h REQUIRED)
  set(_fx_utf8proc_libs ${FX_UTF8PROC_LIBRARY})
  set(_fx_utf8proc_incs ${FX_UTF8PROC_INCLUDE_DIR})
endif()
# Users of the static library link utf8proc too: in this build tree by
# the path found above; installed, as ferrox::utf8proc, which
# ferroxConfig.cmake looks up on the user's machine (a path from this
# machine, e.g. /usr/lib/x86_64-linux-gnu, means nothing there).
foreach(_fx_lib IN LISTS _fx_utf8proc_libs)
  list(APPEND FX_PRIVATE_LIBS $<BUILD_INTERFACE:${_fx_lib}>)
endforeach()
list(APPEND FX_PRIVATE_LIBS $<INSTALL_INTERFACE:ferrox::utf8proc>)
list(APPEND FX_PC_LIBS_PRIVATE -lutf8proc)
if(_fx_utf8proc_incs)
  set_property(SOURCE ${CMAKE_CURRENT_LIST_DIR}/pretok.c APPEND PROPERTY
    INCLUDE_DIRECTORIES ${_fx_utf8proc_incs})
endif()
