#!/usr/bin/env bash
# Compile-time cost of `workflow!`: times `cargo check` and `cargo build --release` of a crate
# that holds one generated workflow of N nodes, and reads how long rustc spends expanding macros
# in it (`-Z time-passes`, through RUSTC_BOOTSTRAP=1 on the stable compiler).
#
#   bash benches/compile_time.sh                       # layered and chain, N = 1 100 500 1000
#   SHAPES=layered SIZES="100 1000" RUNS=1 bash benches/compile_time.sh
#   MODES="check" bash benches/compile_time.sh         # skip the release builds
#
# The scratch crates (written by benches/gen/generate.py) and their own target directory live in
# target/compile-time/. Dependencies are built once first; each timed build touches the crate's
# lib.rs so that only the crate itself is rebuilt. N = 1 is the baseline: a one-operation
# workflow, i.e. cargo's and rustc's fixed cost. Prints a markdown table of medians, in seconds.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"
shapes="${SHAPES:-layered chain}"
sizes="${SIZES:-1 100 500 1000}"
modes="${MODES:-check release}"
runs="${RUNS:-3}"
work="$root/target/compile-time"
export CARGO_TARGET_DIR="$work/target"
export CARGO_TERM_COLOR=never
# Full builds of the crate, as after an edit of the workflow: no incremental reuse of a touched
# but unchanged file.
export CARGO_INCREMENTAL=0
mkdir -p "$work"
: >"$work/build.log" # cargo's output (warnings of path dependencies are replayed every time)

now() { date +%s.%N; }

median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Seconds rustc spent in macro expansion for the crate in $1 (a check build).
expansion() {
    (cd "$1" && touch src/lib.rs && RUSTC_BOOTSTRAP=1 cargo rustc --offline -q --lib --profile check -- -Z time-passes 2>&1) |
        awk '/expand_crate$/ { sub(/;/, "", $2); print $2; exit }'
}

# Seconds for one build of the crate in $1 with cargo subcommand arguments $2.
build_time() {
    local dir="$1" args="$2" start end
    touch "$dir/src/lib.rs"
    start=$(now)
    # shellcheck disable=SC2086 # $args is a list of words
    (cd "$dir" && cargo $args --offline -q 2>>"$work/build.log")
    end=$(now)
    echo "$end - $start" | bc
}

printf '| shape | nodes |'
for mode in $modes; do printf ' %s (s) |' "$mode"; done
printf ' expansion in rustc (s) |\n|---|---:|'
for _ in $modes; do printf -- '---:|'; done
printf -- '---:|\n'

for shape in $shapes; do
    for n in $sizes; do
        if [[ "$n" == 1 && "$shape" != "${shapes%% *}" ]]; then
            continue # one baseline is enough
        fi
        dir="$work/$shape-$n"
        python3 benches/gen/generate.py --crate "$dir" --shape "$shape" --nodes "$n" --flow "$root"
        cp "$root/Cargo.lock" "$dir/Cargo.lock"
        # Warm up: build the dependencies (and the crate) once in each mode.
        for mode in $modes; do
            case "$mode" in
                check) (cd "$dir" && cargo check --offline -q 2>>"$work/build.log") ;;
                release) (cd "$dir" && cargo build --release --offline -q 2>>"$work/build.log") ;;
            esac
        done
        label="$shape"
        [[ "$n" == 1 ]] && label="baseline"
        printf '| %s | %s |' "$label" "$n"
        for mode in $modes; do
            case "$mode" in
                check) args="check" ;;
                release) args="build --release" ;;
            esac
            for _ in $(seq "$runs"); do build_time "$dir" "$args"; done | median | xargs printf ' %.2f |'
        done
        printf ' %s |\n' "$(expansion "$dir")"
    done
done
