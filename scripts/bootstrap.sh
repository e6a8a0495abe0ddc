#!/usr/bin/env bash
# Installs everything the testbed needs and starts Open vSwitch; safe to run again.
#   apt:  openvswitch-switch mininet iperf3 ethtool iproute2 util-linux python3-venv
#         tcpdump (packet capture into pcap files),
#         clang-14 libbpf-dev bpftool (the BPF switch dataplane: classes, ECN, PFC),
#         openssh-client sudo (Mininet's cluster edition: fabrics across servers);
#         with --test also chromium chromium-driver (the live view's browser test) and
#         openssh-server (the second server the cluster tests build on this machine; no
#         sshd is started on the machine itself)
#   venv: .venv made from the system python3 with --system-site-packages (sees Debian's mininet)
#   pip:  the pinned dependencies of setup.cfg (torch==2.13.0 among them) and the project itself
# Open vSwitch is started with a socket send buffer large enough for the fabric's queues
# (see docs/FIDELITY.md); `testbed` checks it again before every run. TESTBED_START_OVS=0
# installs only (the Dockerfile's build step: a build has no privileges to start it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV="$ROOT/.venv"
APT_PACKAGES=(openvswitch-switch mininet iperf3 iputils-ping ethtool iproute2 util-linux procps tcpdump python3-venv python3-pip clang-14 llvm-14 libbpf-dev bpftool openssh-client sudo)
# --test: what only the tests need too (the live view's page, driven in headless Chromium)
if [ "${1:-}" = "--test" ]; then
  APT_PACKAGES+=(chromium chromium-driver openssh-server)
fi

log() { printf '[bootstrap] %s\n' "$*" >&2; }

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    log "error: missing Debian packages: ${missing[*]}; run this as root (sudo)"; exit 1
  fi
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # No service starts from these installs (openssh-server would start an sshd on the host):
  # policy-rc.d 101 is Debian's "not now" to invoke-rc.d, kept only while installing.
  policy=/usr/sbin/policy-rc.d
  ours=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; ours=1
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || { [ "$ours" = 0 ] || rm -f "$policy"; exit 1; }
  [ "$ours" = 0 ] || rm -f "$policy"
fi

# --test in a git checkout its user owns: the repository's commit-msg hook
# (CONTRIBUTING.md); a checkout of another user's is left alone (git would write its
# config as root)
if [ "${1:-}" = "--test" ] && [ -e "$ROOT/.git" ] && command -v git >/dev/null \
    && [ "$(stat -c %u "$ROOT/.git")" = "$(id -u)" ] \
    && [ -z "$(git -C "$ROOT" config --get core.hooksPath 2>/dev/null)" ]; then
  git -C "$ROOT" config core.hooksPath .githooks && log "git hooks: .githooks (commit-msg)"
fi

stamp="$VENV/.installed-$(sha1sum "$ROOT/setup.cfg" | cut -c1-12)"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV from /usr/bin/python3 (--system-site-packages)"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
if [ ! -f "$stamp" ]; then
  log "installing Python dependencies (torch==2.13.0 CPU and the pins in setup.cfg)"
  pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
  # ryu 4.34 ships only a setup.py that calls easy_install.get_script_args, which
  # setuptools removed; build it with the last setuptools that still has it, then move on.
  if ! "$VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("ryu") == "4.34"' 2>/dev/null; then
    "${pip[@]}" 'setuptools==65.7.0' wheel
    "${pip[@]}" 'ryu==4.34'
  fi
  "${pip[@]}" 'setuptools>=77.0.3'
  # torch pinned and installed before anything that depends on it, so nothing pulls CUDA.
  "${pip[@]}" 'torch==2.13.0'
  "${pip[@]}" -e "$ROOT[test]"
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi

if [ "${TESTBED_START_OVS:-1}" = 0 ]; then
  log "TESTBED_START_OVS=0: Open vSwitch not started"
elif [ "$(id -u)" -eq 0 ]; then
  "$VENV/bin/python" -m testbed.dataplane.ovs ensure-started
else
  log "not root: Open vSwitch not checked (unit tests do not need it)"
fi
