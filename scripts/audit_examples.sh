#!/usr/bin/env bash
# The README's two `dclr audit` runs ("Which φ for my data?"), from the data folder: MiniLM as the
# guide, 2,000 lines each (31 batches of 64, seed 42), the audits written to
# benchmarks/results/audit_<corpus>.json. ~20 s each on 2 CPU cores.
#   - stsb_train_1000_pairs: both sides of STS-B train's first 1,000 pairs, one sentence a line
#     (sentence 1 then sentence 2), so paraphrases and exact copies share batches;
#   - mr_pos_2000: the first 2,000 positive movie reviews of MR (SentEval).
#   bash scripts/audit_examples.sh            # data: $DCLR_DATA_DIR, else ../shared/data
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
data="${DCLR_DATA_DIR:-$(cd .. && pwd)/shared/data}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
head -n 1000 "$data/senteval/STS/STSBenchmark/sts-train.csv" \
    | awk -F'\t' '{print $6; print $7}' > "$work/stsb_train_1000_pairs.txt"
head -n 2000 "$data/senteval/MR/rt-polarity.pos" > "$work/mr_pos_2000.txt"
for corpus in stsb_train_1000_pairs mr_pos_2000; do
    # from the work folder, so the audit records the corpus by its name, not a temporary path
    (cd "$work" && python3 -m dclr audit "$corpus.txt" --data-dir "$data" \
        --json "$repo/benchmarks/results/audit_$corpus.json")
done
