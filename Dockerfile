# The testbed in a container, for CI in a privileged container (README, "In a container").
#
# Its steps are the README's scripts and nothing else, so the image cannot drift from what a
# machine runs: the build runs scripts/bootstrap.sh --test (every package, the tests'
# Chromium too, the venv, torch 2.13.0 CPU; Open vSwitch is not started, a build has no
# privileges), and the container runs
# scripts/test.sh (the default) or scripts/run-default.sh, each of which runs bootstrap.sh
# again: it finds everything installed and starts Open vSwitch's userspace datapath (no
# kernel module needed). tests/unit/test_container.py checks that this file stays so.
#
#   docker build -t dcn-testbed .
#   docker run --rm --privileged --network host dcn-testbed
#   docker run --rm --privileged --network host -v "$PWD/results:/opt/dcn-testbed/results" \
#       dcn-testbed scripts/run-default.sh
FROM debian:12

# torch's CPU wheels (PyPI's Linux build of torch brings several GB of CUDA libraries)
ENV PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu

WORKDIR /opt/dcn-testbed
COPY . .
RUN TESTBED_START_OVS=0 scripts/bootstrap.sh --test

CMD ["scripts/test.sh"]
