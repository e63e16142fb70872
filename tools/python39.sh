#!/usr/bin/env bash
# CPython 3.9, the oldest Python the wheel is for, for `make wheel-test`: Debian 11's packages
# (python3.9 and what pip needs beside it: distutils, OpenSSL 1.1), downloaded from Debian's
# archive and unpacked into $1 (nothing is installed on the system). Prints the interpreter's
# path; it needs LD_LIBRARY_PATH=$1/usr/lib/x86_64-linux-gnu for its ssl module.
set -euo pipefail
dir=${1:?usage: python39.sh DIR}
if [ -x "$dir/usr/bin/python3.9" ]; then
    echo "$dir/usr/bin/python3.9"
    exit 0
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# apt's lists and the downloaded packages go into a folder of this script's own, removed after.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/state/lists/partial" "$work/cache/archives/partial" "$work/sources" "$work/debs"
: > "$work/sources.list"
cat > "$work/sources/bullseye.sources" <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: bullseye
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt=(apt-get -q -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/sources"
     -o "Dir::State=$work/state" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
"${apt[@]}" update >/dev/null
# Versions pinned where the system has its own (newer) version of a package of the same name.
(cd "$work/debs" && "${apt[@]}" download python3.9-minimal libpython3.9-minimal libpython3.9-stdlib \
    python3.9 libssl1.1 python3-distutils=3.9.2-1 python3-lib2to3=3.9.2-1 >/dev/null)
for deb in "$work"/debs/*.deb; do
    dpkg-deb -x "$deb" "$dir"
done
echo "$dir/usr/bin/python3.9"
