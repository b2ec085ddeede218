#!/bin/sh
# install.sh: puts scooter rules (ruled, rulec, their systemd units and
# docs) in place on a Librescoot scooter (docs/librescoot.md#installing).
#
#   sh install.sh                      as root on the scooter
#   DESTDIR=/tmp/root sh install.sh    into a scratch root; nothing enabled
#
# Every path it installs is printed with its mode. Run from anywhere: the
# files are taken from the directory this script is in.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=${DESTDIR:-}
root=${root%/}

say() {
    printf '%s\n' "$*"
}

# dir MODE PATH: the directory PATH (under DESTDIR), made with MODE. One
# that exists keeps its mode: an owner may have closed it (0700).
dir() {
    if [ -d "$root$2" ]; then
        say "$(mode_of "$root$2") $2/ (exists, mode kept)"
        return
    fi
    mkdir -p "$root$2"
    chmod "$1" "$root$2"
    say "$1 $2/"
}

# mode_of PATH: its permission bits as four octal digits (0755), read from
# `ls -ld` so that busybox's ls will do.
mode_of() {
    perms=$(ls -ld "$1" | cut -c2-10)
    digits=
    for who in 1 4 7; do
        bits=$(printf '%s' "$perms" | cut -c"$who"-"$((who + 2))")
        digit=0
        case $bits in r??) digit=$((digit + 4)) ;; esac
        case $bits in ?w?) digit=$((digit + 2)) ;; esac
        case $bits in ??[xst]) digit=$((digit + 1)) ;; esac
        digits=$digits$digit
    done
    special=0
    case $perms in ??[sS]??????) special=$((special + 4)) ;; esac
    case $perms in ?????[sS]???) special=$((special + 2)) ;; esac
    case $perms in ????????[tT]) special=$((special + 1)) ;; esac
    printf '%s%s\n' "$special" "$digits"
}

# put MODE FROM TO: the archive's file FROM installed as TO with MODE. A new
# file is renamed over the old one, so a running binary is never written to.
put() {
    mkdir -p "$(dirname "$root$3")"
    cp "$here/$2" "$root$3.new.$$"
    chmod "$1" "$root$3.new.$$"
    mv -f "$root$3.new.$$" "$root$3"
    say "$1 $3"
}

# keep MODE FROM TO: as put, unless TO exists (a file the owner edits).
keep() {
    if [ -e "$root$3" ]; then
        say "kept $3 (exists, not replaced)"
    else
        put "$@"
    fi
}

put 0755 bin/ruled /usr/bin/ruled
put 0755 bin/rulec /usr/bin/rulec
put 0644 systemd/ruled.service /etc/systemd/system/ruled.service
put 0644 systemd/ruled-rules.path /etc/systemd/system/ruled-rules.path
put 0644 systemd/ruled-rules.service /etc/systemd/system/ruled-rules.service
keep 0644 etc/default/ruled /etc/default/ruled
dir 0755 /usr/share/doc/scooter-rules
put 0644 doc/librescoot.md /usr/share/doc/scooter-rules/librescoot.md
put 0644 doc/sources.md /usr/share/doc/scooter-rules/sources.md
put 0644 doc/service.md /usr/share/doc/scooter-rules/service.md
put 0644 doc/operating.md /usr/share/doc/scooter-rules/operating.md
put 0644 doc/rules.md /usr/share/doc/scooter-rules/rules.md
put 0644 doc/rulec.md /usr/share/doc/scooter-rules/rulec.md
put 0644 doc/when-language.md /usr/share/doc/scooter-rules/when-language.md
put 0644 doc/semantics.md /usr/share/doc/scooter-rules/semantics.md
put 0644 doc/diagnostics.md /usr/share/doc/scooter-rules/diagnostics.md
put 0644 LICENSE /usr/share/doc/scooter-rules/LICENSE

# The control key: ruled signs its control replies with it and `ruled ctl`
# checks them (docs/operating.md#trust). Readable by root only; made once.
key=/etc/ruled/control.key
dir 0700 /etc/ruled
if [ -e "$root$key" ]; then
    say "kept $key (exists, not replaced)"
else
    # 32 random bytes, written as 64 hex digits.
    (
        umask 077
        od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$root$key.new.$$"
    )
    chmod 0600 "$root$key.new.$$"
    if [ "$(id -u)" = 0 ]; then
        chown 0:0 "$root$key.new.$$"
    fi
    mv -f "$root$key.new.$$" "$root$key"
    say "0600 $key (new)"
fi

dir 0755 /var/lib/ruled
dir 0755 /data/extensions

# The first bundle (and a new one for a new rulec): built from the rule
# files now in /data/extensions, if this machine can run rulec. A failed
# build keeps the bundle there was.
bundle=/var/lib/ruled/rules.bundle
if "$root/usr/bin/rulec" --version >/dev/null 2>&1; then
    if (umask 022 && "$root/usr/bin/rulec" build "$root/data/extensions" -o "$root$bundle" >&2); then
        chmod 0644 "$root$bundle"
        say "0644 $bundle (built from /data/extensions)"
    else
        say "warning: rulec build /data/extensions failed (above); no new bundle." \
            "Fix the rule files, then: systemctl start ruled-rules" >&2
    fi
else
    say "note: $root/usr/bin/rulec does not run here (another CPU?): no bundle built;" \
        "ruled-rules.service builds it on the scooter"
fi

if [ -n "$root" ]; then
    say "DESTDIR is set: no unit enabled"
elif ! command -v systemctl >/dev/null 2>&1; then
    say "no systemctl: no unit enabled"
else
    systemctl daemon-reload
    systemctl enable ruled.service ruled-rules.path
    say "enabled ruled.service ruled-rules.path"
    if systemctl is-active --quiet librescoot-events.service; then
        say "librescoot-events is running: migrate first (docs/librescoot.md#migrating)"
    else
        say "start them: systemctl start ruled-rules.path ruled.service"
    fi
fi
