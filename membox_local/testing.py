"""Deterministic test doubles for the backend and the embedder (tests only, never in the package)."""
from __future__ import annotations

import hashlib
import json
import re

import numpy as np

from membox_local.backends.base import (Backend, JsonResult, LabelResult, ScoreResult, StructuredOutputError,
                                        TextResult, Usage, parse_json_output)
from membox_local.embed import Embedder

WORD = re.compile(r"[a-z]+")
STOP = set("the a an and or i you to of in on at is it my me we he she for with that this was so do did".split())


class FakeEmbedder(Embedder):
    """Bag of hashed words: texts sharing words are similar, others near-orthogonal."""

    model_name = "fake-bow"
    dim = 384  # as all-MiniLM-L6-v2, so that configs with a fitted content vector (configs/cpu.toml) run here
    buckets = 256  # words hash into the first 256 dimensions: the doubles' cosines are calibrated for that

    def __init__(self):
        self.calls = 0
        self.texts = 0

    def encode(self, texts):
        self.calls += 1
        self.texts += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in WORD.findall(t.lower()):
                if w in STOP:
                    continue
                h = int(hashlib.md5(w.encode()).hexdigest(), 16)
                out[i, h % self.buckets] += 1.0
            n = np.linalg.norm(out[i])
            out[i] = out[i] / n if n else out[i]
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return out


def _lines(prompt_user: str) -> list[str]:
    return [l for l in prompt_user.splitlines() if re.match(r"^[A-Z][\w ]*: ", l)]


class FakeBackend(Backend):
    """Answers from the prompt text by fixed rules. `fail_extract` makes the next N extractions fail."""

    name = "fake"

    def __init__(self):
        self.calls: list[tuple[str, str]] = []
        self.fail_extract = 0
        self.batches: list[int] = []
        self.responder = None  # optional callable(request) -> dict for JSON stages
        # text requests with on_text get their answer word by word, with the white space a model writes around it
        # (False: never called, as a backend that cannot stream; Backend.text then hands over the whole text)
        self.streams = True

    def _usage(self, req, out: str) -> Usage:
        return Usage(req.stage, len(req.prompt.user.split()) + len(req.prompt.system.split()), len(out.split()) or 1)

    def label_batch(self, requests):
        self.batches.append(len(requests))
        out = []
        for r in requests:
            self.calls.append((r.stage, r.prompt.user))
            lines = _lines(r.prompt.user)
            words = [set(WORD.findall(l.lower())) - STOP for l in lines]
            overlap = len(words[-1] & set().union(*words[:-1])) if len(words) > 1 else 1
            label = r.labels[0] if overlap else r.labels[-1]
            probs = {l: (0.9 if l == label else 0.1 / (len(r.labels) - 1)) for l in r.labels}
            out.append(LabelResult(label, self._usage(r, label), probs if r.logprobs else None))
        return out

    def json_batch(self, requests):
        self.batches.append(len(requests))
        out = []
        for r in requests:
            self.calls.append((r.stage, r.prompt.user))
            if r.stage == "extract" and self.fail_extract > 0:
                self.fail_extract -= 1
                out.append(StructuredOutputError("extract: output did not match the schema", "{", self._usage(r, "{")))
                continue
            if self.responder is not None and (data := self.responder(r)) is not None:
                raw = json.dumps(data)
            elif r.stage in ("link", "trace-init"):
                raw = json.dumps(self._weave(r))
            elif r.stage in ("ew-extract", "ew-summary"):
                raw = json.dumps(self._eventweave(r))
            else:
                raw = json.dumps(self._extract(r))
            try:
                out.append(JsonResult(parse_json_output(raw, r.schema), self._usage(r, raw), raw))
            except ValueError as exc:  # as the real backends: output the schema refuses is that request's error
                out.append(StructuredOutputError(f"{r.stage}: output did not match the schema: {exc}", raw,
                                                 self._usage(r, raw)))
        return out

    def _extract(self, r) -> dict:
        """Each numbered line ("3. Ana: I adopted ...") whose speaker says they did something is an event citing
        that line, in the speaker's words."""
        lines = [(int(m.group(1)), m.group(2)) for m in re.finditer(r"^(\d+)\. [^:\n]+: (.*)$", r.prompt.user, re.M)]
        text = " ".join(said for _, said in lines)
        words = [w for w in WORD.findall(text.lower()) if w not in STOP and len(w) > 3]
        props = r.schema["properties"]
        kws = list(dict.fromkeys(words))[: props["keywords"]["maxItems"] if "keywords" in props else 8]
        events = [{"line": n, "event": said[:150]} for n, said in lines
                  if re.search(r"\bI (signed|adopted|started|booked|ran|made)\b", said)]
        out = {"topic": " ".join(kws[:3]), "keywords": kws, "events": events[: props.get("events", {}).get("maxItems")]}
        return {k: v for k, v in out.items() if k in props}  # [extract] keywords = "text", events = "lines": fewer

    def _weave(self, r) -> dict:
        """Trace Weaver stages: new events (numbered lines) sharing a word of 4+ letters go together."""
        def words(line):
            return {w for w in WORD.findall(line.lower()) if w not in STOP and len(w) > 3}

        numbered = [words(l.split(". ", 1)[1]) for l in r.prompt.user.splitlines() if re.match(r"^\d+\. ", l)]
        if r.stage == "link":
            chain = set().union(*(words(l) for l in r.prompt.user.splitlines() if l.startswith("- ")))
            return {"continues": [i for i, w in enumerate(numbered, 1) if w & chain]}
        stories: list[tuple[set, list[int]]] = []
        for i, w in enumerate(numbered, 1):
            home = next((s for s in stories if s[0] & w), None)
            if home is None:
                stories.append((set(w), [i]))
            else:
                home[0].update(w)
                home[1].append(i)
        cap = r.schema["properties"]["storylines"]["maxItems"]
        return {"storylines": [{"title": " ".join(sorted(s[0])[:3]), "events": s[1]} for s in stories[:cap]]}

    def _eventweave(self, r) -> dict:
        """EventWeave stages. ew-extract: each sentence of the new turn (the line after "New turn:") that is no
        question and has 6+ words is an event, "I" replaced by the speaker, `when` its relative time phrase (or "");
        other turns have none. ew-summary: the first items joined."""
        if r.stage == "ew-summary":
            items = [l.split(". ", 1)[1] for l in r.prompt.user.splitlines() if re.match(r"^\d+\. ", l)]
            return {"summary": "; ".join(items[:2])[: r.schema["properties"]["summary"]["maxLength"]]}
        from membox_local.dates import find_time_phrase

        lines = r.prompt.user.splitlines()
        speaker, _, text = lines[lines.index("New turn:") + 1].partition(": ")
        spec = r.schema["properties"]["events"]
        items = spec["items"]["properties"]
        events = []
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            if sentence.endswith("?") or len(sentence.split()) < 6:
                continue
            said = re.sub(r"\bI\b", speaker, sentence)[: items["text"]["maxLength"]]
            events.append({"text": said, "when": (find_time_phrase(sentence) or "")[: items["when"]["maxLength"]]})
        return {"events": events[: spec["maxItems"]]}

    def score_batch(self, requests):
        """A word of the continuation costs 1 nat if the context has it, 4 otherwise."""
        self.batches.append(len(requests))
        out = []
        for r in requests:
            self.calls.append((r.stage, r.context + r.continuation))
            seen = set(WORD.findall(r.context.lower()))
            words = WORD.findall(r.continuation.lower()) or ["_"]
            lp = -sum(1.0 if w in seen else 4.0 for w in words)
            out.append(ScoreResult(lp, len(words), Usage(r.stage, len(r.context.split()) + len(words), 0)))
        return out

    def text_batch(self, requests):
        self.batches.append(len(requests))
        out = []
        for r in requests:
            self.calls.append((r.stage, r.prompt.user))
            memory, _, q = r.prompt.user.rpartition("Question:")
            qwords = set(WORD.findall(q.lower())) - STOP
            best = max(_lines(memory) or ["none: not mentioned"],
                       key=lambda l: len(qwords & set(WORD.findall(l.lower()))))
            ans = best.split(": ", 1)[1]
            if r.on_text is not None and self.streams:
                for piece in [" "] + [w if i == 0 else " " + w for i, w in enumerate(ans.split(" "))] + ["\n"]:
                    r.on_text(piece)
            out.append(TextResult(ans, self._usage(r, ans)))
        return out


class FakeContinuityScorer:
    """The continuity cross-encoder's double (membox_local.continuity.MODELS["scorer"]): the logit grows with the
    share of the new line's words found in the context, so lines on one topic continue and a new topic does not."""

    def __init__(self, path=None):
        self.path = path
        # a file named *evidence* stands for the evidence reading (box-hits' second stage): the same overlap score
        reading = "evidence" if path is not None and "evidence" in str(path) else "continuity"
        self.meta = {"base": "all-minilm-l6-v2", "reading": reading}
        self.pairs = 0
        self._cache: dict = {}

    @staticmethod
    def _words(text: str) -> set[str]:
        return {w for w in WORD.findall(text.lower()) if w not in STOP}

    def score(self, pairs):
        self.pairs += len(pairs)
        out = []
        for ctx, new in pairs:
            words = self._words(new)
            share = len(words & self._words(ctx)) / len(words) if words else 0.0
            out.append(6.0 * share - 1.5)
        self._cache.update(zip(pairs, out))
        return out

    def known(self):
        return dict(self._cache)

    def remember(self, logits):
        self._cache.update(logits)

    def keep(self, pairs):
        pass

    def make_resident(self):
        pass
