"""Continuity judges: does a new message continue the open box?

A judge's `decide` is a generator step: it may yield requests (embeddings, a label call, score requests) and
returns a `Decision`. New judges subclass `Judge` and register in JUDGES. Every judge sees the open box, the new
message and, if it asks for them (`Judge.history`), the conversation's messages just before it: online, never a
later message. Thresholds and weights come from LoomConfig and are fitted on TIAGE train/dev by
`membox fit embedding` and `membox fit hybrid`, and the CPU default's by `membox fit content`
(see BENCHMARKS.md, "Topic segmentation").
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .backends.base import BackendError, LabelRequest, ScoreRequest
from .config import (CE_FEATURES, CONV_FEATURES, FEATURES, LEVEL_AFTER, LM_FEATURES, ConfigError, LoomConfig,  # noqa: F401
                     read_content_file)
from .prompts import (CONTINUITY_LABELS, DIALOGUE_HEADER, authors_continuity_prompt, continuity_prompt,
                      dialogue_context, dialogue_line)
from .records import Message
from .requests import EmbedRequest, Step


@dataclass
class Decision:
    continues: bool
    label: str  # what the judge said, for logs and agreement metrics
    score: float | None = None  # judge confidence that the message continues, when it has one
    # loom.cap_split "weakest": the open box is cut before its message at this index (that message opens a box
    # of its own, which this message continues); None: no cut
    split_at: int | None = None


class Judge:
    name = "base"
    uses_llm = False
    generates = False  # sends label requests (generation) to the build's model, stage "judge"
    history = 0  # how many of the conversation's earlier messages `decide` wants as `earlier`

    def __init__(self, cfg: LoomConfig):
        self.cfg = cfg

    def decide(self, recent: Sequence[Message], new: Message, earlier: Sequence[Message] = ()) -> Step:
        """`recent`: the open box's messages; `earlier`: the conversation's last `history` messages before
        `new` (the open box's included, oldest first), across boxes and sessions."""
        raise NotImplementedError


def _unit(v: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return v / norm if norm else v


def _threshold_decision(score: float, threshold: float) -> Decision:
    cont = score >= threshold
    return Decision(cont, "yes" if cont else "no", score)


class EmbeddingJudge(Judge):
    """Cosine of the new message against the mean of the open box's last `window` messages."""

    name = "embedding"

    def decide(self, recent, new, earlier=()):
        window = list(recent)[-self.cfg.window:]
        vecs = yield EmbedRequest(tuple(m.text for m in window) + (new.text,))
        score = float(np.dot(_unit(np.asarray(vecs[:-1], dtype=np.float32).mean(axis=0)), vecs[-1]))
        return _threshold_decision(score, self.cfg.threshold)


# ---- hybrid: a logistic model over cheap features --------------------------------------------------
def _words(text: str) -> int:
    return len(text.split())


def hybrid_features(box_vecs: np.ndarray, new_vec: np.ndarray, box: Sequence[Message], new: Message,
                    window: int) -> dict[str, float]:
    """Features of (open box, new message); `box_vecs` are the box messages' unit embeddings, in order.

    The `rel_*` features subtract the box's own coherence (mean cosine of its consecutive messages), so a
    conversation whose messages are all alike (long LoCoMo turns) is judged against its own baseline.
    """
    box_vecs = np.asarray(box_vecs, dtype=np.float32)
    sims = box_vecs @ new_vec
    n = len(box)
    cos_last = float(sims[-1])
    cos_prev = float(sims[-2]) if n >= 2 else cos_last
    cos_window = float(_unit(box_vecs[-window:].mean(axis=0)) @ new_vec)
    cos_box = float(_unit(box_vecs.mean(axis=0)) @ new_vec)
    if n >= 2:
        cohesion = float(np.mean(np.sum(box_vecs[1:] * box_vecs[:-1], axis=1)))
    else:
        cohesion = cos_last  # no pair inside the box yet: neutral
    last = box[-1]
    return {
        "cos_last": cos_last,
        "cos_prev": cos_prev,
        "cos_window": cos_window,
        "cos_box": cos_box,
        "cohesion": cohesion,
        "rel_last": cos_last - cohesion,
        "rel_window": cos_window - cohesion,
        "max_box": float(sims.max()),
        "speaker_change": float(new.speaker != last.speaker),
        "new_question": float("?" in new.text),
        "last_question": float("?" in last.text),
        "len_new": math.log1p(_words(new.text)),
        "len_last": math.log1p(_words(last.text)),
        "box_age": math.log(n),
    }


def likelihood_features(box: Sequence[Message], new: Message, window: int, knot: float = 1.0) -> Step:
    """The language model's view, per token of the new message: `lm_pmi`, how much more likely it is after
    the box's last `window` messages than after a bare header (pointwise mutual information), `lm_cond`, its
    log-likelihood after them, and `lm_pmi_low` = min(lm_pmi, knot), so that a linear model can treat "the box
    does not help at all" (a hard switch) apart from the soft range. A message that continues the topic is
    predicted by what came before."""
    line = dialogue_line(new)
    after_box = yield ScoreRequest(dialogue_context(list(box)[-window:]), line, stage="judge")
    alone = yield ScoreRequest(DIALOGUE_HEADER, line, stage="judge")
    # per token of each score's own span: equal spans unless a long message was cut to fit the scorer's context
    cond = after_box.logprob / max(1, after_box.tokens)
    pmi = cond - alone.logprob / max(1, alone.tokens)
    return {"lm_pmi": pmi, "lm_cond": cond, "lm_pmi_low": min(pmi, knot)}


# Conversation-relative features: a cue's value minus its level over the conversation's last `history` messages,
# so that a genre where every other turn is a question (a booking dialogue) or where the model predicts lines
# less well is judged against itself rather than against the chit-chat the weights were fitted on.
QUESTION_PRIOR = 0.35  # share of messages with a "?" assumed before a conversation has LEVEL_AFTER earlier messages
# lm_pmi_ratio divides by the conversation's median PMI, but never by less than this (nats per token): a
# conversation whose lines barely predict each other would otherwise make every ratio large and unstable
PMI_FLOOR = 0.3


def _median_or(values: Sequence[float], default: float) -> float:
    return float(np.median(values)) if len(values) >= LEVEL_AFTER else default


def conversation_features(earlier: Sequence[Message], new: Message, last: Message) -> dict[str, float]:
    """Question and length cues of `new` and `last` (the open box's last message) against the conversation's
    level over `earlier` (its messages before `new`); neutral until there are three earlier messages."""
    rate = float(np.mean(["?" in m.text for m in earlier])) if len(earlier) >= LEVEL_AFTER else QUESTION_PRIOR
    len_new, len_last = math.log1p(_words(new.text)), math.log1p(_words(last.text))
    level = _median_or([math.log1p(_words(m.text)) for m in earlier], len_new)
    return {"new_question_conv": float("?" in new.text) - rate, "last_question_conv": float("?" in last.text) - rate,
            "len_new_conv": len_new - level, "len_last_conv": len_last - level}


def load_content_vector(name: str) -> np.ndarray:
    """The `content` feature's vector from its JSON file ({"embedder", "vector", ...}); a relative path is
    looked up in configs/ first, then in the working directory."""
    if not name:
        raise ConfigError("the hybrid feature 'content' needs [loom] content_vector (a JSON file fitted by "
                          "`membox fit content --write`, e.g. content/tiage-all-minilm-l6-v2.json)")
    path, data = read_content_file(name)
    try:
        vec = np.asarray(data["vector"], dtype=np.float32)
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}: not a content vector file (needs a JSON object with a list 'vector'): {e}") \
            from None
    if vec.ndim != 1 or not len(vec) or not np.all(np.isfinite(vec)):
        raise ConfigError(f"{path}: 'vector' must be a non-empty list of finite numbers")
    return vec


class HybridJudge(Judge):
    """Logistic model: p(continue) = sigmoid(bias + sum of weights[f] * feature f); continues at p >= 0.5.

    Features are MiniLM cosines and surface cues (`hybrid_features`); weights on `lm_*` features add the
    language model's likelihoods (`likelihood_features`, two score requests per judged message); `*_conv`
    features compare with the conversation's last `history` messages (`conversation_features`; `lm_pmi_conv` is
    the new message's PMI minus the median PMI of those messages, each after its own two predecessors;
    `lm_pmi_ratio` the PMI divided by that median: scale-free, so one threshold on it alone, fitted on TIAGE
    dialogues joined end to end, finds hard switches in conversations of any genre: configs/cpu-switch.toml).
    `content` is a fitted vector dotted with the new message's embedding ([loom] content_vector): what a line
    that opens a topic looks like, beyond the bare "?" cue. With [loom] switch_ratio > 0 a box also opens
    whenever lm_pmi_ratio falls below it (label "switch"), so one judge sees shifts inside a chat through the
    logistic and hard switches between unrelated exchanges through the ratio (configs/cpu.toml).
    `ce_continue` is the continuity cross-encoder's logit ([loom] ce_model, continuity.py: MiniLM with an adapter
    fitted on TIAGE train reading the box's last `window` lines with the new one): no LLM call (configs/cpu-ce.toml,
    the candidate: worse than the default on DialSeg711, BENCHMARKS.md "Topic segmentation")."""

    name = "hybrid"
    PMI_CACHE = 50_000  # PMIs kept for reuse as later messages' history (least recently used dropped)

    def __init__(self, cfg: LoomConfig):
        super().__init__(cfg)
        if not cfg.weights:
            raise ConfigError("the hybrid judge needs [loom] weights (feature -> weight); fit them with "
                              "`membox fit hybrid` or use configs/cpu.toml")
        unknown = sorted(set(cfg.weights) - set(FEATURES))
        if unknown:
            raise ConfigError(f"[loom] weights: unknown hybrid feature(s) {unknown}; known: {list(FEATURES)}")
        self.weights = {k: float(v) for k, v in cfg.weights.items()}
        used = {k for k, w in self.weights.items() if w}
        if cfg.switch_ratio:  # the switch rule reads lm_pmi_ratio whatever its weight
            used.add("lm_pmi_ratio")
        if cfg.ce_switch:  # and the cross-encoder's, ce_conv
            used.add("ce_conv")
        self.uses_llm = bool(used & set(LM_FEATURES))
        self.uses_conversation = bool(used & set(CONV_FEATURES))
        self.content = load_content_vector(cfg.content_vector) if "content" in used else None
        self.ce = None
        if used & set(CE_FEATURES):  # the cross-encoder, loaded once per process (continuity.py)
            from .continuity import continuity_scorer

            self.ce = continuity_scorer(cfg.ce_model)
        if self.uses_conversation and cfg.history < LEVEL_AFTER:
            raise ConfigError(f"[loom] history = {cfg.history}: the *_conv features need at least {LEVEL_AFTER} "
                              "earlier messages")
        # the earlier messages' PMIs and cross-encoder logits need their own `window` predecessors
        own = cfg.window if self.uses_llm or self.ce is not None else 0
        self.history = cfg.history + own if self.uses_conversation else 0
        self._pmi: OrderedDict[tuple[str, str], float] = OrderedDict()

    def features(self, recent: Sequence[Message], new: Message, earlier: Sequence[Message] = ()) -> Step:
        box = list(recent)
        vecs = yield EmbedRequest(tuple(m.text for m in box) + (new.text,))
        vecs = np.asarray(vecs, dtype=np.float32)
        feats = hybrid_features(vecs[:-1], vecs[-1], box, new, self.cfg.window)
        if self.content is not None:
            if len(self.content) != vecs.shape[1]:
                raise ConfigError(f"[loom] content_vector {self.cfg.content_vector!r} has {len(self.content)} "
                                  f"dimensions, the embedder gives {vecs.shape[1]}: fit one for this embedder "
                                  "(`membox fit content`) or drop the 'content' weight")
            feats["content"] = float(self.content @ vecs[-1])
        if self.ce is not None:  # one MiniLM pass over the box's last `window` lines and the new one; no LLM call
            from .continuity import pair_text

            feats["ce_continue"] = self.ce.score([pair_text(box[-self.cfg.window:], new)])[0]
            if self.uses_conversation:  # against the conversation's median (0 until it has one)
                level = _median_or(self._earlier_ce(list(earlier)), feats["ce_continue"])
                feats["ce_conv"] = feats["ce_continue"] - level
                feats["ce_conv_low"] = min(feats["ce_conv"], 0.0)
        if self.uses_conversation:
            feats.update(conversation_features(list(earlier)[-self.cfg.history:], new, box[-1]))
        if self.uses_llm:
            lm = yield from likelihood_features(box, new, self.cfg.window, self.cfg.lm_knot)
            if len(box) >= self.cfg.window:  # the context was its own predecessors: reusable as history
                self._remember(new, lm["lm_pmi"])
            earlier_pmis = (yield from self._earlier_pmis(list(earlier))) if self.uses_conversation else []
            # neutral (lm_pmi_conv = 0, lm_pmi_ratio = 1) until the conversation has a level
            level = _median_or(earlier_pmis, lm["lm_pmi"])
            lm["lm_pmi_conv"] = lm["lm_pmi"] - level
            lm["lm_pmi_conv_low"] = min(lm["lm_pmi_conv"], 0.0)
            lm["lm_pmi_ratio"] = lm["lm_pmi"] / max(PMI_FLOOR, level) if len(earlier_pmis) >= LEVEL_AFTER else 1.0
            feats.update(lm)
        return feats

    def _earlier_ce(self, earlier: list[Message]) -> list[float]:
        """Cross-encoder logits of the last `history` earlier messages that follow `window` messages of their own
        session, each against those (one batch; the scorer keeps the ones it has read)."""
        from .continuity import pair_text

        w = self.cfg.window
        pairs = [pair_text(earlier[j - w:j], earlier[j]) for j in range(max(w, len(earlier) - self.cfg.history),
                                                                         len(earlier))
                 if all(c.session == earlier[j].session for c in earlier[j - w:j])]
        return self.ce.score(pairs) if pairs else []

    def _remember(self, m: Message, pmi: float) -> None:
        self._pmi[(m.conversation_id, m.message_id)] = pmi
        self._pmi.move_to_end((m.conversation_id, m.message_id))
        while len(self._pmi) > self.PMI_CACHE:
            self._pmi.popitem(last=False)

    def _earlier_pmis(self, earlier: list[Message]) -> Step:
        """PMIs of the last `history` earlier messages that follow `window` messages of their own session."""
        w, out = self.cfg.window, []
        for j in range(max(w, len(earlier) - self.cfg.history), len(earlier)):
            m, ctx = earlier[j], earlier[j - w:j]
            if any(c.session != m.session for c in ctx):
                continue
            key = (m.conversation_id, m.message_id)
            if key in self._pmi:
                self._pmi.move_to_end(key)
            else:
                self._remember(m, (yield from likelihood_features(ctx, m, w, self.cfg.lm_knot))["lm_pmi"])
            out.append(self._pmi[key])
        return out

    def probability(self, feats: dict[str, float]) -> float:
        z = self.cfg.bias + sum(w * feats[k] for k, w in self.weights.items() if w)
        return 1.0 / (1.0 + math.exp(-z))

    def decide(self, recent, new, earlier=()):
        feats = yield from self.features(recent, new, earlier)
        p = self.probability(feats)
        if self.cfg.switch_ratio and feats["lm_pmi_ratio"] < self.cfg.switch_ratio:
            return Decision(False, "switch", p)  # a hard switch: the box's lines do not predict the new one
        if self.cfg.ce_switch and feats["ce_conv"] < -self.cfg.ce_switch:
            return Decision(False, "switch", p)  # the cross-encoder's hard switch
        return _threshold_decision(p, 0.5)


# ---- LLM judges -----------------------------------------------------------------------------------
class LLMJudge(Judge):
    """The model labels the message yes / partly / no against the open box's last `window` messages;
    only 'yes' continues."""

    name = "llm"
    uses_llm = True
    generates = True

    def decide(self, recent, new, earlier=()):
        window = list(recent)[-self.cfg.window:]
        res = yield LabelRequest(continuity_prompt(window, new), CONTINUITY_LABELS, stage="judge")
        return Decision(res.label == "yes", res.label, None)


class LLMLogprobJudge(Judge):
    """Same prompt as `llm`, but reads the label distribution: continues when p(yes) >= prob_threshold.

    Small models answer the question near-constantly when asked in words; their p(yes) still ranks
    messages, and a threshold fitted on TIAGE turns that ranking into decisions.
    """

    name = "llm-logprob"
    uses_llm = True
    generates = True

    def decide(self, recent, new, earlier=()):
        window = list(recent)[-self.cfg.window:]
        res = yield LabelRequest(continuity_prompt(window, new), CONTINUITY_LABELS, stage="judge", logprobs=True)
        if not res.probs or "yes" not in res.probs:
            raise BackendError(f"the llm-logprob judge needs label probabilities; the backend returned {res.probs!r} "
                               f"for message {new.message_id} (use the llamacpp backend or the 'llm' judge)")
        return _threshold_decision(float(res.probs["yes"]), self.cfg.prob_threshold)


class AuthorsJudge(Judge):
    """The paper's setting: the two previous messages, a bare three-way question, only 'yes' continues."""

    name = "authors"
    uses_llm = True
    generates = True

    def decide(self, recent, new, earlier=()):
        res = yield LabelRequest(authors_continuity_prompt(list(recent)[-2:], new), CONTINUITY_LABELS,
                                 stage="judge")
        return Decision(res.label == "yes", res.label, None)


JUDGES: dict[str, type[Judge]] = {
    j.name: j for j in (EmbeddingJudge, HybridJudge, LLMJudge, LLMLogprobJudge, AuthorsJudge)
}


def make_judge(cfg: LoomConfig) -> Judge:
    if cfg.judge not in JUDGES:
        raise ConfigError(f"unknown continuity judge '{cfg.judge}' ([loom] judge or --judge); choose one of "
                          f"{', '.join(sorted(JUDGES))}")
    return JUDGES[cfg.judge](cfg)
