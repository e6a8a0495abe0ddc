#!/usr/bin/env bash
# Runs the experiments recorded in docs/BENCHMARKS.md, one after another:
#   sudo scripts/benchmarks.sh OUTDIR            every spec
#   sudo scripts/benchmarks.sh OUTDIR SPEC...    only these (names in experiments/)
set -u
cd "$(dirname "$0")/.."
out=${1:-results/benchmarks-$(date +%Y%m%d-%H%M%S)}
shift || true
mkdir -p "$out"
specs=("$@")
if ((${#specs[@]} == 0)); then
  specs=(reachability reachability_leafspine reachability_bcube link_calibration \
         queue_calibration permutation_fattree permutation_fattree_mtu1500 startup_fattree6 \
         ecn_queue priority incast pfc_victim \
         training_priority training_compression training_consistency training_16_cnn \
         training_link_rate training_ring_vs_ps hedera_fattree hedera_fattree_20mbps \
         parallel_collectives parallel_pipeline parallel_fsdp parallel_moe parallel_placement parallel_16 \
         fault_link fault_link_ff fault_controller fault_training jobs_two jobs_fattree \
         jobs_training)
fi
for spec in "${specs[@]}"; do
  echo "== $spec"
  .venv/bin/testbed run "experiments/$spec.yaml" --out "$out/$spec" || echo "!! $spec failed"
done
