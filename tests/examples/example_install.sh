#!/bin/sh
# example_install.sh — what the README promises an embedder: install tokenkv
# into a prefix, build examples/prefix_service.c against it with pkg-config
# alone, and run it.
#
#   example_install.sh CMAKE BUILD_DIR SOURCE_DIR LIBDIR MODEL CC [CFLAGS...]
#
# LIBDIR is CMAKE_INSTALL_LIBDIR; CFLAGS are extra flags for cc (the
# sanitizers, when the installed library was built with them).
set -eu
cmake=$1 build=$2 src=$3 libdir=$4 model=$5 cc=$6
shift 6
tmp=$(mktemp -d /tmp/tkv-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

"$cmake" --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
export PKG_CONFIG_PATH="$tmp/prefix/$libdir/pkgconfig"
flags=$(pkg-config --cflags --libs tokenkv jansson)
echo "cc examples/prefix_service.c $flags" >&2
# shellcheck disable=SC2086 # pkg-config's flags are words
"$cc" -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wvla "$@" \
  "$src/examples/prefix_service.c" -o "$tmp/service" $flags

# the installed binary too
test -x "$tmp/prefix/bin/tokenkv-example-service"

printf '%s\n' '{"session": "a", "prompt": "Once upon a time", "max_tokens": 4}' \
  '{"session": "b", "prompt": "Once upon a time", "max_tokens": 4}' |
  LD_LIBRARY_PATH="$tmp/prefix/$libdir" "$tmp/service" -m "$model" -t 2 >"$tmp/out"
cat "$tmp/out"
# the second session reuses the first one's prompt but its last token
first=$(sed -n 1p "$tmp/out") second=$(sed -n 2p "$tmp/out") summary=$(sed -n 3p "$tmp/out")
case "$first" in *'"reused_tokens":0'*) ;; *) echo "FAIL: first request reused something" >&2; exit 1 ;; esac
case "$second" in *'"reused_tokens":0'* | *error*) echo "FAIL: second request reused nothing" >&2; exit 1 ;; esac
case "$summary" in *'"check":"TKV_OK"'*) ;; *) echo "FAIL: no summary" >&2; exit 1 ;; esac
echo "example_install: built against $tmp/prefix with pkg-config alone and ran" >&2
