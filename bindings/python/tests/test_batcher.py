"""The batcher: rows, events, sampling, cancelling, leases, asyncio.
Environment: fxtest.py."""

import asyncio
import gc
import json
import threading
import unittest

# fxtest first: it puts the package under test on sys.path.
from fxtest import MODEL, Base, setUpModule  # noqa: F401

import ferrox  # noqa: E402
from ferrox import _capi  # noqa: E402


class TestBatcher(Base):
    def test_rows_are_deterministic_and_independent(self):
        b = self.batcher(max_rows=4)
        prompts = ["Once upon a time", "The dragon said", "Once upon a time"]
        rows = [b.submit(p, max_tokens=12, temperature=0.9, seed=7)
                for p in prompts]
        other = b.submit("Once upon a time", max_tokens=12, temperature=0.9,
                         seed=8)
        self.assertEqual(b.pending, 4)
        b.run()
        self.assertEqual(b.pending, 0)
        results = [r.result() for r in rows]
        for res in results:
            self.assertTrue(res.text)
            self.assertEqual(res.usage.completion_tokens, len(res.tokens))
        # Same request, same seed: same text, although the rows shared
        # the batch with different neighbours.
        self.assertEqual(results[0].text, results[2].text)
        self.assertEqual(results[0].tokens, results[2].tokens)
        self.assertNotEqual(results[0].tokens, results[1].tokens)
        self.assertNotEqual(results[0].tokens, other.result().tokens)
        # Alone in a fresh batcher, the same request gives the same text.
        alone = self.batcher().submit("Once upon a time", max_tokens=12,
                                      temperature=0.9, seed=7).result()
        self.assertEqual(alone.text, results[0].text)

    def test_kv_f16(self):
        # An F16 cache: the same text alone and beside another row.
        texts = []
        for others in (0, 1):
            b = self.batcher(kv_f16=True)
            row = b.submit("Once upon", max_tokens=12, temperature=0.9, seed=7)
            if others:
                b.submit("The dragon said", max_tokens=12, temperature=0.9,
                         seed=8)
            texts.append(row.result().text)
        self.assertTrue(texts[0])
        self.assertEqual(texts[0], texts[1])

    def test_events_stream_in_order(self):
        b = self.batcher()
        row = b.submit("Once upon a time", max_tokens=8, ignore_eos=True)
        events = list(row)
        self.assertIsInstance(events[-1], ferrox.Done)
        self.assertTrue(all(isinstance(e, ferrox.Text) for e in events[:-1]))
        done = events[-1]
        self.assertEqual(done.finish, ferrox.Finish.LENGTH)
        self.assertEqual(len(done.tokens), 8)
        pieces = b"".join(self.model.token_to_piece(t) for t in done.tokens)
        self.assertEqual("".join(e.text for e in events[:-1]).encode(),
                         pieces)
        self.assertTrue(row.done)
        self.assertEqual(list(row), [])  # nothing after Done

    def test_token_prompt_matches_text_prompt(self):
        b = self.batcher()
        text = b.submit("The dragon said", max_tokens=8).result()
        toks = self.model.tokenize("The dragon said")
        by_ids = b.submit(toks, max_tokens=8).result()
        self.assertEqual(text.tokens, by_ids.tokens)

    def test_stop_string(self):
        b = self.batcher()
        full = b.submit("Once upon a time", max_tokens=16,
                        ignore_eos=True).result().text
        stop = full[len(full) // 2:len(full) // 2 + 3]
        self.assertEqual(len(stop), 3)
        res = b.submit("Once upon a time", max_tokens=16, ignore_eos=True,
                       stop=["\x01never", stop]).result()
        self.assertEqual(res.finish, ferrox.Finish.STOP)
        self.assertEqual(res.stop_index, 1)
        self.assertEqual(res.text, full[:full.index(stop)])

    def test_sampling_parameters_reach_the_library(self):
        b = self.batcher()
        base = b.submit("Once", max_tokens=6, temperature=0.8, seed=3)
        banned = base.result().tokens[0]
        # A -inf bias bans the token the unbiased row started with.
        res = b.submit("Once", max_tokens=6, temperature=0.8, seed=3,
                       logit_bias={banned: float("-inf")}, top_k=40,
                       top_p=0.95, min_p=0.01, typical_p=0.99,
                       repeat_penalty=1.1, presence_penalty=0.1,
                       frequency_penalty=0.1, penalty_last_n=16).result()
        self.assertNotEqual(res.tokens[0], banned)
        self.assertNotIn(banned, res.tokens)
        with self.assertRaises(ferrox.FerroxError) as cm:
            b.submit("Once", max_tokens=4, n_logprobs=_capi.MAX_LOGPROBS + 1)
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)

    def test_logprobs(self):
        b = self.batcher()
        res = b.submit("Once", max_tokens=5, n_logprobs=3,
                       ignore_eos=True).result()
        self.assertEqual(len(res.logprobs), 5)
        for tok, ev in zip(res.tokens, res.logprobs):
            self.assertEqual(ev.token, tok)
            self.assertLessEqual(ev.logprob, 0.0)
            self.assertEqual(len(ev.top), 3)
            probs = [p for _, p in ev.top]
            self.assertEqual(probs, sorted(probs, reverse=True))

    def test_grammar(self):
        b = self.batcher()
        for seed in range(3):
            res = b.submit("Answer:", max_tokens=8, temperature=1.0,
                           seed=seed, grammar='root ::= "yes" | "no"').result()
            self.assertIn(res.text, ("yes", "no"))
            self.assertEqual(res.finish, ferrox.Finish.EOS)
        res = b.submit("Answer:", max_tokens=8, grammar_root="answer",
                       grammar='answer ::= "maybe"').result()
        self.assertEqual(res.text, "maybe")

    def test_bad_grammar_raises(self):
        b = self.batcher()
        with self.assertRaises(ferrox.FerroxError) as cm:
            b.submit("x", max_tokens=4, grammar='root ::= "unterminated')
        self.assertEqual(cm.exception.status, ferrox.Status.GRAMMAR)
        self.assertIn("line 1", cm.exception.message)
        self.assertEqual(b.pending, 0)

    def test_json_flag(self):
        b = self.batcher()
        res = b.submit("Data:", max_tokens=24, temperature=0.7, seed=11,
                       json=True).result()
        self.assertTrue(res.text)
        self.assertIn(res.text.lstrip()[0], '{["-0123456789tfn')
        if res.finish == ferrox.Finish.EOS:
            json.loads(res.text)
        with self.assertRaises(ferrox.FerroxError) as cm:
            b.submit("x", max_tokens=4, json=True, grammar='root ::= "a"')
        self.assertEqual(cm.exception.status, ferrox.Status.INVALID_ARG)

    def test_no_room(self):
        b = self.batcher(n_ctx=64)
        with self.assertRaises(ferrox.FerroxError) as cm:
            b.submit("Once upon a time", max_tokens=100)
        self.assertEqual(cm.exception.status, ferrox.Status.NO_ROOM)

    def test_cancel(self):
        b = self.batcher()
        row = b.submit("Once", max_tokens=200, ignore_eos=True)
        b.step()
        b.step()
        row.cancel()
        row.cancel()  # twice is fine
        res = row.result()
        self.assertEqual(res.finish, ferrox.Finish.CANCELLED)
        self.assertLess(res.usage.completion_tokens, 200)
        row.cancel()  # after the end: nothing to do, no error

    def test_cancel_from_another_thread(self):
        b = self.batcher()
        row = b.submit("Once", max_tokens=200, ignore_eos=True)
        started = threading.Event()
        t = threading.Thread(target=lambda: (started.wait(), row.cancel()))
        t.start()
        finish = None
        for ev in row:
            started.set()
            if isinstance(ev, ferrox.Done):
                finish = ev.finish
        t.join()
        self.assertEqual(finish, ferrox.Finish.CANCELLED)

    def test_release_twice_and_close_twice(self):
        b = ferrox.Batcher(self.model, n_ctx=128)
        row = b.submit("Once", max_tokens=50, ignore_eos=True)
        b.step()
        row.release()
        row.release()
        self.assertTrue(row.done)
        self.assertEqual(list(row), [])  # released: no more events
        b.step()
        self.assertEqual(b.pending, 0)
        finished = b.submit("Once", max_tokens=2)
        finished.result()
        finished.release()  # after Done: the handle is gone already
        b.close()
        b.close()
        row.release()
        row.cancel()
        with self.assertRaises(ValueError):
            b.submit("Once")

    def test_context_managers(self):
        with ferrox.Model(MODEL) as m, ferrox.Batcher(m, n_ctx=128) as b:
            with b.submit("Once", max_tokens=50, ignore_eos=True) as row:
                first = next(iter(row))
                self.assertIsInstance(first, ferrox.Text)
            self.assertTrue(row.done)
            b.step()
            self.assertEqual(b.pending, 0)
        self.assertIsNone(b._handle)
        self.assertIsNone(m._handle)

    def test_dropped_row_is_released_by_the_batcher(self):
        b = self.batcher()
        b.submit("Once", max_tokens=100, ignore_eos=True)
        gc.collect()
        self.assertEqual(b.pending, 1)
        b.step()  # releases the orphan on the batcher's own thread
        self.assertEqual(b.pending, 0)
        self.assertEqual(b._rows, {})

    def test_lease(self):
        b = self.batcher()
        # Long enough for whole KV blocks (16 positions): those are pinned.
        prefix = ("You are a knight of the realm. You guard the northern "
                  "gate, speak little and never leave your post.")
        with b.lease(prefix) as lease:
            self.assertEqual(lease.state, ferrox.LeaseState.PENDING)
            for _ in range(10):
                if lease.ready:
                    break
                b.step()
            self.assertTrue(lease.ready)
            self.assertTrue(lease.pinned)
            self.assertEqual(lease.state, ferrox.LeaseState.PINNED)
            suffix = self.model.tokenize(" Speak:", add_special=False)
            res = b.submit(suffix, max_tokens=6, lease=lease).result()
            whole = self.model.tokenize(prefix) + suffix
            self.assertEqual(res.usage.prompt_tokens, len(whole))
            # The row continues the pinned prefix: it generates what the
            # whole prompt does without a lease.
            plain = b.submit(whole, max_tokens=6).result()
            self.assertEqual(res.tokens, plain.tokens)
        lease.release()
        with self.assertRaises(ValueError):
            b.submit("x", lease=lease)
        with self.assertRaises(ValueError):
            lease.state
        # A prefix shorter than one KV block is computed but not pinned.
        with b.lease("Hi") as short:
            b.run()
            self.assertEqual(short.state, ferrox.LeaseState.UNPINNED)


class TestAsync(Base):
    def test_rows_stream_concurrently_without_threads(self):
        b = self.batcher()
        expected = [b.submit(p, max_tokens=10, seed=5, temperature=0.8)
                    .result().text for p in ("Once upon", "The dragon")]
        threads_before = threading.active_count()
        order = []

        async def consume(tag, row):
            parts = []
            async for ev in row:
                order.append(tag)
                if isinstance(ev, ferrox.Text):
                    parts.append(ev.text)
            return "".join(parts)

        async def main():
            r1 = b.submit("Once upon", max_tokens=10, seed=5,
                          temperature=0.8)
            r2 = b.submit("The dragon", max_tokens=10, seed=5,
                          temperature=0.8)
            return await asyncio.gather(consume(1, r1), consume(2, r2))

        got = asyncio.run(main())
        self.assertEqual(got, expected)
        self.assertEqual(threading.active_count(), threads_before)
        # The two consumers took turns rather than one running to the end.
        first_two = order.index(2)
        self.assertLess(first_two, len(order) - order[::-1].index(1) - 1)

    def test_cancelling_the_task_cancels_the_row(self):
        b = self.batcher()
        row = b.submit("Once", max_tokens=200, ignore_eos=True)

        async def main():
            async def consume():
                async for _ in row:
                    pass
            task = asyncio.ensure_future(consume())
            for _ in range(3):
                await asyncio.sleep(0)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        res = row.result()
        self.assertEqual(res.finish, ferrox.Finish.CANCELLED)

    def test_aresult(self):
        b = self.batcher()
        expected = b.submit("Once", max_tokens=6).result()
        got = asyncio.run(b.submit("Once", max_tokens=6).aresult())
        self.assertEqual(got.text, expected.text)
        self.assertEqual(got.tokens, expected.tokens)


if __name__ == "__main__":
    unittest.main()
