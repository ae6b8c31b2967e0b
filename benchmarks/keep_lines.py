"""Issue 68 (records a person reads), first question: how well a line's own text predicts that a later question needs it (LoCoMo dev evidence), CV by conversation."""
import json, re, numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from membox_local.embed import make_embedder
from membox_local.config import load_config
from membox_local.evaluation.locomo import parse_evidence
d = json.load(open("../shared/data/locomo-dev.json"))
rows = []
for c in d:
    ev = set()
    lines = [(k, t) for k, s in c["conversation"].items() if k.startswith("session_") and isinstance(s, list) for t in s]
    known = {t["dia_id"] for _, t in lines}
    for q in c["qa"]:
        if q["category"] in (1, 2, 3, 4):
            ev |= set(parse_evidence(q.get("evidence", []), known)[0])
    for _, t in lines:
        text = t["text"] + (f" [shares {t['blip_caption']}]" if t.get("blip_caption") else "")
        rows.append((c["sample_id"], t["speaker"], text, t["dia_id"] in ev))
emb = make_embedder(load_config("cpu-ce").embedder)
X = np.asarray(emb.encode([f"{s}: {t}" for _, s, t, _ in rows]))
ntok = np.array([len(re.findall(r"\w+|[^\w\s]", t)) for _, _, t, _ in rows])
F = np.hstack([X, np.log1p(ntok)[:, None], np.array([[t.strip().endswith("?")] for _, _, t, _ in rows], float)])
y = np.array([e for *_, e in rows]); conv = np.array([c for c, *_ in rows])
z = np.zeros(len(y))
for c in sorted(set(conv)):
    m = conv == c
    clf = LogisticRegression(C=1.0, max_iter=2000).fit(F[~m], y[~m]); z[m] = clf.decision_function(F[m])
print("lines", len(y), "evidence share", y.mean().round(3), "AUC out of fold", round(roc_auc_score(y, z), 3))
for keep in (0.90, 0.95, 0.98):
    thr = np.quantile(z[y], 1 - keep)
    kept = z >= thr
    print(f"keep {keep:.0%} of evidence lines: {kept.mean():.1%} of lines, {ntok[kept].sum()/ntok.sum():.1%} of tokens")
out = {"command": "python benchmarks/keep_lines.py", "date": __import__("time").strftime("%Y-%m-%d"),
       "lines": int(len(y)), "evidence_share": round(float(y.mean()), 3), "auc_out_of_fold": round(roc_auc_score(y, z), 3),
       "kept": {f"{k:.2f}": {"lines": round(float((z >= np.quantile(z[y], 1 - k)).mean()), 3),
                             "tokens": round(float(ntok[z >= np.quantile(z[y], 1 - k)].sum() / ntok.sum()), 3)}
                for k in (0.90, 0.95, 0.98)}}
open("benchmarks/results/keep-lines.json", "w").write(json.dumps(out, indent=2) + "\n")
