"""What the test_*.py modules share: the Python binding against the real
library and a small synthetic model.

Environment (set by the ctests `binding_python*`, tests/bindings.cmake):
  FERROX_LIBRARY          path of libferrox.so
  FERROX_TEST_MODEL       path of a loadable GGUF model (synthetic-model.gguf)
  FERROX_TEST_INSTALLED   optional: the directory `pip install --target`
                          put the package in; it is tested there instead of
                          the source folder
"""

import os
import sys
import unittest

INSTALLED = os.environ.get("FERROX_TEST_INSTALLED", "")
sys.path.insert(0, INSTALLED or os.path.join(os.path.dirname(__file__), ".."))

import ferrox  # noqa: E402

MODEL = os.environ.get("FERROX_TEST_MODEL", "")
# tests/data/chat: chat templates and what jinja2 renders for them. The
# ctests pass it (the pip test runs a copy of this folder); the fallback
# is its place in the source tree.
CHAT_DATA = os.environ.get("FERROX_TEST_CHAT_DATA") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests",
    "data", "chat")


def chat_data(*parts):
    with open(os.path.join(CHAT_DATA, *parts), encoding="utf-8") as f:
        return f.read()


def setUpModule():
    # A missing model is a broken test setup, not a reason to skip.
    if not os.path.isfile(MODEL):
        raise RuntimeError("FERROX_TEST_MODEL is not a file: %r" % MODEL)


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = ferrox.Model(MODEL)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def batcher(self, **kw):
        kw.setdefault("n_ctx", 256)
        b = ferrox.Batcher(self.model, **kw)
        self.addCleanup(b.close)
        return b
