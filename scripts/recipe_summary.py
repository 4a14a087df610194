#!/usr/bin/env python3
"""One row per trained and evaluated run of the toy corpus, for the recipe study (docs/recipe_study.md):

    scripts/recipe_summary.py RUN_DIR [RUN_DIR ...]

what ended its training, its epochs and best validation BLEU (and the epoch of it), the spread of its last validations,
test BLEU (the beam of eval/test.json) overall and by source length, its brevity (hypothesis / reference words), and
how many of its hypotheses are 3 or more words shorter than their reference (a dropped clause)."""
import json
import os
import sys


def row(run):
    train = json.load(open(os.path.join(run, "train.json")))
    metrics = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if '"valid_bleu"' in l]
    best = max(metrics, key=lambda m: m["valid_bleu"])
    last = [m["valid_bleu"] for m in metrics[-4:]]
    test = json.load(open(os.path.join(run, "eval", "test.json")))
    cfg = json.load(open(os.path.join(run, "config.json")))
    ref_path = cfg["data"]["test"]["tgt"]
    hyps = open(os.path.join(run, "eval", "test.hyp"), encoding="utf-8").read().splitlines()
    refs = open(ref_path, encoding="utf-8").read().splitlines()
    assert len(hyps) == len(refs), (run, len(hyps), len(refs))
    short = sum(1 for h, r in zip(hyps, refs) if len(r.split()) - len(h.split()) >= 3)
    ratio = sum(len(h.split()) for h in hyps) / max(1, sum(len(r.split()) for r in refs))
    by = " / ".join(f"{b['bleu']:.2f}" for b in test["by_length"])
    return (f"| {os.path.basename(run.rstrip('/'))} | {train['ended_by']} | {metrics[-1]['epoch']} | {best['valid_bleu']:.2f} (ep. {best['epoch']}) "
            f"| {min(last):.2f}–{max(last):.2f} | {test['bleu']:.2f} | {by} | {ratio:.4f} | {short} |")


print("| run | ended by | epochs | best valid BLEU | last 4 valid | test BLEU | by length (1-10 … 51-60) | hyp/ref words | 3+ words short |")
print("|---|---|---|---|---|---|---|---|---|")
for r in sys.argv[1:]:
    print(row(r))
