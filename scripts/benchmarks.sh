#!/usr/bin/env bash
# Runs every experiment recorded in docs/BENCHMARKS.md, one after another.
set -u
cd "$(dirname "$0")/.."
out=${1:-results/benchmarks-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
for spec in reachability reachability_leafspine reachability_bcube link_calibration \
            queue_calibration permutation_fattree permutation_fattree_mtu1500 startup_fattree6; do
  echo "== $spec"
  .venv/bin/testbed run "experiments/$spec.yaml" --out "$out/$spec" || echo "!! $spec failed"
done
