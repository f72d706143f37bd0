# Shared by the .ci scripts: start an example server on 127.0.0.1:0 and read the
# address from its first stdout line ("listening on URL ...").
#
#   start_example NAME [ARGS...]   sets LISTEN_URL (the first URL on that line) and
#                                  stops the example when the calling script exits.

start_example() {
    local name="$1"
    shift
    # Built with the axum feature, which web_demo needs (the other examples ignore it);
    # EXAMPLE_FEATURES names others.
    cargo build --locked --quiet --features "${EXAMPLE_FEATURES:-axum}" --example "$name"
    local log
    log="$(mktemp)"
    "target/debug/examples/$name" --listen 127.0.0.1:0 "$@" >"$log" 2>&1 &
    local pid=$!
    # shellcheck disable=SC2064 # expand now: these are this example's pid and log.
    trap "kill $pid 2>/dev/null || true; rm -f '$log'" EXIT
    local line=""
    for _ in $(seq 300); do # bounded: 30 s
        line="$(head -n 1 "$log")"
        [[ "$line" == listening* ]] && break
        if ! kill -0 "$pid" 2>/dev/null; then
            cat "$log" >&2
            echo "$name exited before it listened" >&2
            return 1
        fi
        sleep 0.1
    done
    if [[ "$line" != listening* ]]; then
        cat "$log" >&2
        echo "$name never said where it listens" >&2
        return 1
    fi
    LISTEN_URL="$(sed -E 's#^listening on ([^ ]+).*#\1#' <<<"$line")"
    echo "$name at $LISTEN_URL"
}
