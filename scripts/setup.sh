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

# Optimised with line tables only (-g1): backtraces, perf and sanitizer reports keep their
# file:line, and the build takes about a quarter less time than with a full -g
# (docs/decisions.md). A cmake option given to fulcrum_build overrides these.
FULCRUM_RELEASE_FLAGS=(-DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
                       -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")

# fulcrum_flags LEVEL: the same flags at another optimisation level (-O0, -O1), for builds
# that only run test suites under a sanitizer or fuzzer. Sets FULCRUM_FLAGS.
fulcrum_flags() {
    FULCRUM_FLAGS=(-DCMAKE_C_FLAGS_RELWITHDEBINFO="$1 -g1 -DNDEBUG"
                   -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$1 -g1 -DNDEBUG")
}

# fulcrum_build BUILD_DIR [cmake options...] [-- targets...]
fulcrum_build() {
    local dir="$1"
    shift
    local options=()
    while (($# > 0)) && [[ "$1" != "--" ]]; do
        options+=("$1")
        shift
    done
    [[ "${1:-}" == "--" ]] && shift
    cmake -S "$FULCRUM_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        "${FULCRUM_RELEASE_FLAGS[@]}" "${options[@]}" > "$dir.configure.log" 2>&1 || {
        cat "$dir.configure.log" >&2
        return 1
    }
    sed -n '/Fulcrum build configuration/,/^-- Configuring/p' "$dir.configure.log"
    local targets=()
    for target in "$@"; do targets+=(--target "$target"); done
    cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
}
