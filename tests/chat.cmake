# Chat templates (issue 11): every family against its published template,
# bad input, and a model carrying its own template. Public API only, so it
# runs against both libraries.
fx_add_test(test_chat SOURCES test_chat.c test_chat_templates.c)
# The Jinja interpreter (issue 39): real models' templates against the
# text jinja2 renders for them (tests/data/chat), fx_chat_apply_ex, and
# end-of-turn markers derived from templates of no known family.
fx_add_test(test_jinja SOURCES test_jinja.c)
# The interpreter's bounds and failure paths, with small limits and a
# failing allocator: internal API, static library only.
fx_add_test(test_jinja_limits INTERNAL SOURCES test_jinja_limits.c)
