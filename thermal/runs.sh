# Sourced by bench-table.sh, check-safety.sh and seed-sweep.sh: the shipped runs, one way.
#   each_run: prints "plant trace ceiling" for every run of RUNS, at the plant's limit and at
#             --ceiling stock-peak, in the table's order. The plants and traces came in sets:
#             RUNS=first (default) is the tuning plants and traces with the first held-out plant
#             and trace; RUNS=second, third or fourth, the runs a later held-out set added (its
#             plants on every trace so far, the earlier plants on its trace); RUNS=all, every
#             plant on every trace of the first SEEN_SETS sets. RUNS=fifth to eighth are the
#             fifth to eighth held-out sets, which each judged one change (thermal/FINDINGS.md)
#             and are no longer held out; RUNS=all leaves them out so that its figures stay
#             comparable with earlier ones. RUNS=ninth (a slow-prefill Strix Halo box and long
#             documents) and RUNS=tenth (a workstation blower and a support desk) each judged one
#             change too. RUNS=eleventh (a stacked blower 3090 with a degree of room at full
#             speed, and a classroom) and RUNS=twelfth (a zero-rpm 4080 SUPER and a research
#             agent's fan-out) were each written and committed before anything ran on them, to
#             judge one change each. So were RUNS=thirteenth (a zero-rpm 4060 Ti in a small
#             case and a household's voice assistant), run once on the controller as it was as
#             fresh data, and RUNS=fourteenth (a zero-rpm RX 7600 XT in a cramped case and an
#             office's meeting assistant), which judged the 10-s junction step (not kept).
#             RUNS=fifteenth (a zero-rpm 5070 Ti with a fast die and an evaluation harness)
#             judged the power-limit prior, RUNS=sixteenth (a 3090 Ti with a liquid cooler and
#             long-context prompts) the unforeseen work, and RUNS=seventeenth (a zero-rpm 5080
#             with a flow-through cooler and a translation batch) that and the forecast across
#             the safety layer's holds. RUNS=eighteenth (a zero-rpm 5060 Ti in a cupboard and a
#             mailbox assistant) judged what the controller learns through the safety layer's
#             holds. RUNS=nineteenth (a zero-rpm RX 9060 XT in a mini-ITX case and a home
#             assistant's evening) judged the unforeseen work held until the fan can answer (not
#             kept). RUNS=twentieth (a 70 W low-profile blower RTX 4000 SFF Ada in an office
#             server and a coding agent's issue queue) judged the last seconds' work going on.
#             RUNS=twentyfirst (the upper of two R9700 blowers in a workstation and a game
#             server's characters) judged the slower memory of the largest prompt (kept).
#             RUNS=twentysecond (an RTX 4090 unlocked to 600 W under a large zero-rpm cooler
#             and a home's camera box describing four cameras) judged the heatsink's
#             warming after the fan answers (not kept). RUNS=twentythird (an RTX 5090
#             Founders Edition in a warm attic office and a newsroom's wire desk) judged the
#             work going on at its peak (not kept). RUNS=twentyfourth (an RX 7900 XT in a
#             living-room HTPC case and a studio's subtitling box) judged the heatsink fit
#             under work that never settles (kept). RUNS=twentyfifth (an RTX A6000 blower in
#             a small office's tower and a team's code-completion server) judged a fresh
#             model's ambient from its first reading (not kept). RUNS=twentysixth (an RTX 5090
#             on a custom water loop and a community's chat bot) judged room for a prompt
#             landing on the work going on (kept). RUNS=twentyseventh (a dust-clogged
#             RTX 3090 and an owner's benchmark evening) was written and committed before
#             anything ran on it, to judge the next change.
#   bench_run PLANT TRACE CEILING SEED [ARGS...]: `lucebox thermal bench --json` of that run
#             ($LUCEBOX; the held-out Azure-style trace sampled 1 in 2).
PLANT_SETS=("r9700-blower rtx3090-openair strix-halo-box rtx4090-hot-case" "rtx2080ti-blower rtx5090-sff"
  "rx7900xtx-ref" "rtx4070-itx rx9070xt-triple" "rtx3080-twin" "rx7800xt-dual"
  "rtx3060-dual" "rtxpro4000-blower" "strix-halo-quiet" "w7900-blower" "rtx3090-turbo-stacked"
  "rtx4080s-triple" "rtx4060ti-sff"
  "rx7600xt-cramped" "rtx5070ti-dual" "rtx3090ti-aio" "rtx5080-flow"
  "rtx5060ti-closet" "rx9060xt-itx" "rtx4000ada-sff" "r9700-pair-upper" "rtx4090-unlocked"
  "rtx5090-fe-warm" "rx7900xt-htpc" "rtxa6000-blower" "rtx5090-loop"
  "rtx3090-dusty")
TRACE_SETS=("chat agent batch azure-style-holdout" "code-assist-holdout" "office-holdout"
  "kb-assistant-holdout" "home-lab-holdout" "parallel-agents-holdout"
  "pipelines-holdout" "ingest-holdout" "doc-review-holdout" "support-desk-holdout"
  "classroom-holdout" "research-agent-holdout" "voice-assistant-holdout"
  "meeting-notes-holdout" "eval-harness-holdout" "long-context-holdout" "translation-holdout"
  "email-triage-holdout" "home-automation-holdout" "swe-agent-holdout"
  "game-npcs-holdout" "camera-vlm-holdout" "newsroom-holdout"
  "subtitles-holdout" "autocomplete-holdout" "discord-bot-holdout"
  "bench-sweep-holdout")
# The sets RUNS=all covers: the four the README's all-rows figures were measured on.
SEEN_SETS=4

# RUNS names a set by its place: SET_NAMES[i] is set i+1 (one per entry of PLANT_SETS).
SET_NAMES=(first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth
  thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth
  nineteenth twentieth twentyfirst twentysecond twentythird twentyfourth twentyfifth
  twentysixth twentyseventh)

each_run() {
  local ceiling n
  for ceiling in limit stock-peak; do
    if [ "${RUNS:-first}" = all ]; then
      runs_of "${PLANT_SETS[*]:0:SEEN_SETS}" "${TRACE_SETS[*]:0:SEEN_SETS}" "$ceiling"
      continue
    fi
    for n in "${!SET_NAMES[@]}"; do
      [ "${SET_NAMES[n]}" = "${RUNS:-first}" ] && break
    done
    if [ "${SET_NAMES[n]}" != "${RUNS:-first}" ]; then
      local names
      names=$(printf '%s, ' "${SET_NAMES[@]}")
      echo "RUNS must be ${names%, } or all, not $RUNS" >&2
      return 2
    fi
    set_runs $((n + 1)) "$ceiling"
  done
}

# The runs set N added: its plants on the traces of sets 1..N, the plants of sets 1..N-1 on its
# traces.
set_runs() {
  local n=$1 ceiling=$2
  runs_of "${PLANT_SETS[n - 1]}" "${TRACE_SETS[*]:0:n}" "$ceiling"
  runs_of "${PLANT_SETS[*]:0:n-1}" "${TRACE_SETS[n - 1]}" "$ceiling"
}

runs_of() {
  local plant trace
  for plant in $1; do
    for trace in $2; do
      echo "$plant $trace $3"
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
