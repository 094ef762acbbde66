# Sourced by scripts/demo and scripts/test: installs the Debian packages that are missing,
# then configures and builds Fulcrum in $FULCRUM_BUILD_DIR (default: build/).
set -euo pipefail

FULCRUM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FULCRUM_BUILD_DIR="${FULCRUM_BUILD_DIR:-$FULCRUM_ROOT/build}"

fulcrum_install_packages() {
    local missing=()
    local package
    while read -r package; do
        [[ -z "$package" || "$package" == \#* ]] && continue
        if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$package")
        fi
    done < "$FULCRUM_ROOT/scripts/debian-packages.txt"
    if ((${#missing[@]} > 0)); then
        echo "fulcrum: installing ${#missing[@]} Debian packages: ${missing[*]}"
        local sudo=""
        [[ $(id -u) -ne 0 ]] && sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
            "${missing[@]}" > /tmp/fulcrum-apt.log 2>&1 || {
            echo "fulcrum: apt-get install failed; see /tmp/fulcrum-apt.log" >&2
            tail -20 /tmp/fulcrum-apt.log >&2
            return 1
        }
    fi
}

# fulcrum_build BUILD_DIR [cmake options...] [-- targets...]
# Optimised at $FULCRUM_OPT (default -O2; the sanitizer and fuzz builds of scripts/test pass
# -O0 or -O1) with line tables only (-g1): backtraces, perf and sanitizer reports keep their
# file:line, and the build takes about a quarter less time than with a full -g
# (docs/decisions.md). At the default -O2 the Qt Test suites' own sources are compiled at -O1
# (a quarter to a third less time for each; the code they test stays at -O2).
fulcrum_build() {
    local dir="$1"
    local flags="${FULCRUM_OPT:--O2} -g1 -DNDEBUG"
    local test_opt=""
    [[ -z "${FULCRUM_OPT:-}" ]] && test_opt=-O1
    shift
    local options=()
    while (($# > 0)) && [[ "$1" != "--" ]]; do
        options+=("$1")
        shift
    done
    [[ "${1:-}" == "--" ]] && shift
    cmake -S "$FULCRUM_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
        -DFULCRUM_TEST_OPT="$test_opt" \
        "${options[@]}" > "$dir.configure.log" 2>&1 || {
        cat "$dir.configure.log" >&2
        return 1
    }
    sed -n '/Fulcrum build configuration/,/^-- Configuring/p' "$dir.configure.log"
    local targets=()
    for target in "$@"; do targets+=(--target "$target"); done
    cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
}
