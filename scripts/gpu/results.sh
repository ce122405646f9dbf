# Sourced by the GPU scripts (from the repository root).
# results_dir NAME: print the folder a run writes its results to, created and absolute: $OUT when set,
# else bench/results/NAME_<UTC stamp>.
results_dir() {
  local dir=${OUT:-bench/results/$1_$(date -u +%Y%m%dT%H%M%SZ)}
  mkdir -p "$dir" && (cd "$dir" && pwd)
}
