#!/usr/bin/env bash
# Runs the experiments recorded in docs/BENCHMARKS.md (and the README's table), one after
# another:
#   sudo scripts/benchmarks.sh OUTDIR            every spec
#   sudo scripts/benchmarks.sh OUTDIR SPEC...    only these (names in experiments/)
# Some names run more than once, each into its own OUTDIR/NAME-FABRIC directory:
#   reachability_survey      all-pairs pings on every survey fabric under its own routing
#                            (a spec written into OUTDIR/specs; the hybrid's packet part
#                            under ECMP), as tests/integration/test_fabric.py runs them
#   permutation_survey       on every survey fabric at 20 Mb/s; the hybrid's packet part
#                            under ECMP and single path (its own routing moves circuits)
#   permutation_relay_fair   on the relay fabrics (DCell, FiConn, MDCube) at 20 Mb/s
#   plugins_fattree          with its plugins, then without them (the baseline)
#   jobs_two, jobs_unequal   with their policies, then with MLTCP in the hosts' congestion
#                            control and fair sharing over 50 iterations (NAME-mltcp-cc),
#                            jobs_two also with a 2-segment initial window (-mltcp-cc-iw2)
set -u
cd "$(dirname "$0")/.."
out=${1:-results/benchmarks-$(date +%Y%m%d-%H%M%S)}
shift || true
mkdir -p "$out/specs"
specs=("$@")
if ((${#specs[@]} == 0)); then
  specs=(reachability reachability_leafspine reachability_bcube link_calibration \
         queue_calibration permutation_fattree permutation_fattree_mtu1500 startup_fattree6 \
         quickstart reachability_survey permutation_survey permutation_relay_fair \
         circuits_hybrid \
         ecn_queue priority incast pfc_victim rdma_dcqcn rdma_convergence rdma_incast \
         rdma_fct rdma_irn rdma_pfc_victim \
         training_priority training_compression training_consistency training_16_cnn \
         training_link_rate training_ring_vs_ps training_survey training_large_batch \
         training_fusion training_scheduling \
         hedera_fattree hedera_fattree_20mbps \
         parallel_collectives parallel_pipeline parallel_fsdp parallel_moe parallel_placement parallel_16 \
         parallel_roce parallel_roce_ecmp parallel_3d parallel_pipemare \
         parallel_smoke \
         fault_link fault_link_ff fault_controller fault_training jobs_two jobs_unequal jobs_fattree \
         jobs_roce jobs_transports \
         jobs_training plugins_fattree)
fi

# the survey's fabrics as docs/BENCHMARKS.md ("The survey's fabrics") ran them, each as
# `--topology` takes it; rates are added where a run sets them
survey=("dcell n=4 k=1" "ficonn n=4 k=1" "mdcube n=2 k=1 m0=2 m1=2" \
        "vl2 da=4 di=4 hosts_per_tor=4" "torus sides=4x4" "torus sides=3x3x2" \
        "rail servers=4 rails=4 spines=2")
relays=("dcell n=4 k=1" "ficonn n=4 k=1" "mdcube n=2 k=1 m0=2 m1=2")
hybrid="hybrid racks=4 hosts_per_rack=4"

# the same links at 20 Mb/s, in each kind's own parameter names
at_20mbps() {
  case $1 in
    vl2*) echo "$1 host_rate=20 fabric_rate=20" ;;
    rail*) echo "$1 nic_rate=20 nvlink_rate=80 uplink_rate=20" ;;
    hybrid*) echo "$1 host_rate=20 packet_rate=20 circuit_rate=40" ;;
    *) echo "$1 rate_mbps=20" ;;
  esac
}

# NAME SPEC_FILE [testbed run's further options]
run() {
  local name=$1 file=$2
  shift 2
  echo "== $name"
  .venv/bin/testbed run "$file" --out "$out/$name" "$@" || echo "!! $name failed"
}

# OUTDIR/NAME-dcell-n4-k1 and so on: one directory per fabric
label() {
  local words=($2)
  local IFS=-
  echo "$1-${words[*]//=/}"
}

for spec in "${specs[@]}"; do
  case $spec in
    reachability_survey)
      for routing in own ecmp; do
        printf '%s\n' "name: reachability-survey-$routing" \
          "topology: {kind: fattree, params: {k: 4}}" "controller: {routing: $routing}" \
          "experiments:" "  - {type: reachability, count: 2}" \
          > "$out/specs/reachability_survey_$routing.yaml"
      done
      for t in "${survey[@]}"; do
        run "$(label "$spec" "$t")" "$out/specs/reachability_survey_own.yaml" --topology "$t"
      done
      run "$(label "$spec" "$hybrid")" "$out/specs/reachability_survey_ecmp.yaml" \
        --topology "$hybrid"
      ;;
    permutation_survey)
      for t in "${survey[@]}"; do
        run "$(label "$spec" "$t")" "experiments/$spec.yaml" --topology "$(at_20mbps "$t")"
      done
      sed 's/routings: \[own, ecmp\]/routings: [ecmp, single]/' "experiments/$spec.yaml" \
        > "$out/specs/${spec}_hybrid.yaml"
      run "$(label "$spec" "$hybrid")" "$out/specs/${spec}_hybrid.yaml" \
        --topology "$(at_20mbps "$hybrid")"
      ;;
    permutation_relay_fair)
      for t in "${relays[@]}"; do
        run "$(label "$spec" "$t")" "experiments/$spec.yaml" --topology "$(at_20mbps "$t")"
      done
      ;;
    jobs_two|jobs_unequal)
      run "$spec" "experiments/$spec.yaml"
      mltcp=(--set hosts.congestion_control=mltcp --set 'experiments.0.policies=[none]'
             --set experiments.0.iters=50)
      run "$spec-mltcp-cc" "experiments/$spec.yaml" "${mltcp[@]}"
      if [ "$spec" = jobs_two ]; then
        run "$spec-mltcp-cc-iw2" "experiments/$spec.yaml" "${mltcp[@]}" \
          --set hosts.initial_window_pkts=2
      fi
      ;;
    plugins_fattree)
      run "$spec" "experiments/$spec.yaml"
      sed 's/^  plugins: .*/  plugins: []/' "experiments/$spec.yaml" \
        > "$out/specs/${spec}_baseline.yaml"
      run "$spec-baseline" "$out/specs/${spec}_baseline.yaml"
      ;;
    *)
      run "$spec" "experiments/$spec.yaml"
      ;;
  esac
done
