# Sourced by bench-table.sh and check-safety.sh: the shipped runs, one way.
#   each_run: prints "plant trace ceiling" for every shipped plant x trace, at the plant's limit
#             and at --ceiling stock-peak, in the table's order.
#   bench_run PLANT TRACE CEILING SEED [ARGS...]: `lucebox thermal bench --json` of that run
#             ($LUCEBOX; the held-out Azure-style trace sampled 1 in 2).
each_run() {
  local ceiling plant trace
  for ceiling in limit stock-peak; do
    for plant in r9700-blower rtx3090-openair strix-halo-box rtx4090-hot-case; do
      for trace in chat agent batch azure-style-holdout; do
        echo "$plant $trace $ceiling"
      done
    done
  done
}

bench_run() {
  local plant=$1 trace=$2 ceiling=$3 seed=$4
  shift 4
  local extra=()
  [ "$ceiling" = stock-peak ] && extra+=(--ceiling stock-peak)
  [ "$trace" = azure-style-holdout ] && extra+=(--sample 2)
  "$LUCEBOX" thermal bench --plant "thermal/plants/$plant.toml" --trace "thermal/traces/$trace.csv" \
    --seed "$seed" --json "${extra[@]}" "$@" </dev/null
}
