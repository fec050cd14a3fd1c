"""Python binding of ferrox (ctypes over the C API in include/ferrox.h).

    import ferrox
    with ferrox.Model("model.gguf") as model, ferrox.Batcher(model) as b:
        row = b.submit("Once upon a time", max_tokens=32, seed=42)
        for event in row:                     # steps the batcher as needed
            if isinstance(event, ferrox.Text):
                print(event.text, end="")

    # or, inside asyncio, cooperatively:
    async for event in row: ...

Ownership: Model, Batcher, Row and Lease each own one C handle and release
it in close()/release() (also via `with`). Closing twice is harmless. A
handle dropped without closing is reclaimed by the garbage collector as a
safety net: a Model or Batcher is freed there directly (nothing else can be
using it), while a Row or Lease only queues itself and the batcher
releases it at its next step, because the collector may run on any thread
and the batcher's calls must stay on one thread at a time.

Threads: no thread is ever started by the binding. Batcher calls are
serialized by a lock (the C library requires one thread at a time), except
Row.cancel(), which may be called from any thread at any time, even while
another thread is inside step(), as fx_cancel allows.
"""

# The code lives in private submodules, one topic each; everything is
# re-exported here, so `ferrox.X` resolves for every name it did when this
# was one file (the standard-library and typing names too).
import asyncio
import collections
import ctypes
import dataclasses
import enum
import itertools
import json as _json
import operator
import os
import threading
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from . import _capi
from ._capi import lib
from ._common import (_Enum, Status, Finish, SpecialToken, TokenType,
                      LeaseState, ToolFormat, _U32_MAX, _U64_MAX, _I32_MAX,
                      _int_arg, _token, _token_array, _enum, FerroxError,
                      version, _text, _bytes, _cstr, _errbuf, _sized_text,
                      _json_text)
from ._events import (Usage, Text, Token, Done, Completion,
                      _start, _convert)
from ._chat import (_messages, _chat_flags, apply_chat_template,
                    _chat_ex, render_chat_template, chat_stop_strings,
                    detect_chat_template, chat_families)
from ._grammar import (json_schema_to_grammar, _tool,
                       tools_to_grammar, tool_format_trigger)
from ._model import ModelInfo, TensorInfo, Model
from ._batcher import _RowState, Batcher, Row, Lease

__all__ = [
    "Status", "Finish", "SpecialToken", "TokenType", "FerroxError", "Model",
    "ModelInfo", "TensorInfo", "LeaseState", "Batcher", "Row", "Lease",
    "Text", "Token", "Done", "Usage", "Completion", "ToolFormat",
    "apply_chat_template", "chat_families", "chat_stop_strings",
    "detect_chat_template", "json_schema_to_grammar", "render_chat_template",
    "tool_format_trigger", "tools_to_grammar", "version",
]

# The public classes and functions still present themselves as ferrox.X
# (repr, help, pickle), as before the split.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
