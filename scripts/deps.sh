#!/usr/bin/env bash
# Installs the Debian packages the project's servers need, only when something is missing, so
# that `make test` and `make demo` work on a fresh Debian 12 machine and cost nothing when warm.
set -euo pipefail

# chromium renders sac/checker/'s report headless (its test screenshots it);
# libpostgresql-jdbc-java lets Spark read the dedup ledgers in PostgreSQL over JDBC;
# iproute2 and nftables build netns clusters and cut links between their nodes (sac.chaos.partition);
# mmdebstrap builds the Debian 13 root filesystem RabbitMQ 4.0 runs from (on the first
# `sac server up --rabbitmq 4.0`, cached in /var/cache/sac: sac/server/_rootfs.py);
# golang-go and golang-github-rabbitmq-amqp091-go-dev build the Go anchor `make bench`
# measures the SDK against (bench/go/anchor.go, offline, in GOPATH mode).
packages=(rabbitmq-server zookeeper default-jre-headless openssl postgresql chromium
          libpostgresql-jdbc-java iproute2 nftables mmdebstrap
          golang-go golang-github-rabbitmq-amqp091-go-dev)
python_ok=1
python3 -c 'import venv, ensurepip' 2>/dev/null || python_ok=0

missing=()
for pkg in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
# Java may come from elsewhere than Debian's default-jre-headless: any `java` will do.
if command -v java >/dev/null 2>&1; then
    missing=("${missing[@]/default-jre-headless}")
fi
[[ $python_ok == 1 ]] || missing+=(python3-venv)

wanted=()
for pkg in "${missing[@]}"; do [[ -n "$pkg" ]] && wanted+=("$pkg"); done
if ((${#wanted[@]} == 0)); then
    exit 0
fi
if [[ $(id -u) != 0 ]]; then
    echo "scripts/deps.sh: missing Debian packages: ${wanted[*]}; run as root or install them" >&2
    exit 1
fi
echo "installing Debian packages: ${wanted[*]}"
export DEBIAN_FRONTEND=noninteractive
# Package scripts must not start the system-wide RabbitMQ, ZooKeeper or PostgreSQL (whose
# postinst creates a "main" cluster on port 5432 and would start it): we run our own.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    created_policy=1
fi
trap '[[ $created_policy == 1 ]] && rm -f "$policy"' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${wanted[@]}" >/dev/null
