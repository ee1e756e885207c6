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
