# Helpers shared by scripts/test and .ci/run: `source` it, do not run it.

step() { printf '==> %s\n' "$*"; }
die() { printf '%s: %s\n' "$0" "$*" >&2; exit 1; }

APT_UPDATED=
# apt_install WHAT PACKAGE...: installs Debian packages with apt-get. Only root may: anyone else
# is told that WHAT is missing and which packages provide it.
apt_install() {
    local what=$1
    shift
    [[ $EUID -eq 0 ]] || die "$what: not installed; run as root to install it, or install it first (Debian packages: $*)"
    step "installing $* with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if [[ -z $APT_UPDATED ]]; then
        apt-get update -qq
        APT_UPDATED=1
    fi
    apt-get install -y -qq "$@" >/dev/null
}

# tests/reqwest_connect.rs builds native-tls, which links the system OpenSSL through openssl-sys:
# it needs OpenSSL's headers and pkg-config to find them.
need_openssl_dev() {
    if ! command -v pkg-config >/dev/null || ! pkg-config --exists openssl; then
        apt_install "OpenSSL's development files (for the TLS test, tests/reqwest_connect.rs)" \
            libssl-dev pkg-config
    fi
}

# start_rabbitmq DIR: starts a throwaway RabbitMQ node (Debian's rabbitmq-server, installed with
# apt-get when missing) whose data, logs, configuration and Erlang cookie are all under DIR, on
# free ports of 127.0.0.1, and waits until it is up. Exports:
#   AMQP_URL             amqp://guest:guest@127.0.0.1:PORT/%2f
#   RETRY_AMQP_BROKER    a script for the tests: `"$RETRY_AMQP_BROKER" restart` stops the node
#                        and starts it again on the same ports with the same data (`stop` and
#                        `start` too)
# Stop it with stop_rabbitmq DIR (the broker script's `stop`). Needs free_port (scripts/test).
start_rabbitmq() {
    local dir=$1 port dist_port
    if [[ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]]; then
        apt_install RabbitMQ rabbitmq-server
        # Debian starts its own node at install time where it can: not wanted here.
        systemctl stop rabbitmq-server >/dev/null 2>&1 || true
    fi
    port=$(free_port)
    dist_port=$(free_port)
    mkdir -p "$dir"
    cat >"$dir/rabbitmq.conf" <<CONF
listeners.tcp.default = 127.0.0.1:$port
loopback_users = none
CONF
    echo '[].' >"$dir/enabled_plugins"
    # Everything the node and its CLI need, in one place the broker script sources.
    cat >"$dir/env" <<ENV
export HOME='$dir'
export RABBITMQ_NODENAME='rabbit-test-$$@localhost'
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
export RABBITMQ_NODE_PORT=$port
export RABBITMQ_DIST_PORT=$dist_port
export RABBITMQ_MNESIA_BASE='$dir/mnesia'
export RABBITMQ_LOG_BASE='$dir/log'
export RABBITMQ_CONFIG_FILE='$dir/rabbitmq.conf'
export RABBITMQ_ENABLED_PLUGINS_FILE='$dir/enabled_plugins'
export RABBITMQ_PID_FILE='$dir/pid'
ENV
    cat >"$dir/broker" <<'SCRIPT'
#!/usr/bin/env bash
# The throwaway RabbitMQ node of scripts/test: start, stop or restart it.
set -euo pipefail
dir=$(dirname "$(readlink -f "$0")")
source "$dir/env"
bin=/usr/lib/rabbitmq/bin
start() {
    # setsid: the node outlives the shell that started it, not the test run (stopped on exit).
    setsid "$bin/rabbitmq-server" >>"$dir/server.log" 2>&1 </dev/null &
    for _ in $(seq 1 120); do
        if "$bin/rabbitmqctl" -n "$RABBITMQ_NODENAME" -q await_startup --timeout 5 >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.5
    done
    echo "RabbitMQ did not start; see $dir/server.log and $dir/log" >&2
    return 1
}
stop() {
    "$bin/rabbitmqctl" -n "$RABBITMQ_NODENAME" -q stop >/dev/null 2>&1 || true
}
case ${1:-} in
    start) start ;;
    stop) stop ;;
    restart) stop; start ;;
    *) echo "usage: $0 start|stop|restart" >&2; exit 2 ;;
esac
SCRIPT
    chmod 755 "$dir/broker"
    "$dir/broker" start || { tail -n 40 "$dir/server.log" >&2; die "RabbitMQ did not start"; }
    export AMQP_URL="amqp://guest:guest@127.0.0.1:$port/%2f"
    export RETRY_AMQP_BROKER="$dir/broker"
}

# stop_rabbitmq DIR: stops the node start_rabbitmq DIR started (if it is running).
stop_rabbitmq() {
    [[ -x $1/broker ]] && "$1/broker" stop
    return 0
}
