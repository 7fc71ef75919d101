#!/bin/bash
# Rewrites every dynamically linked x86-64 executable in the given directories (default
# /usr/bin /usr/sbin) with the default spec, runs the original and the rewritten program with
# one argument (default --version; stdin /dev/null, an empty cwd, 5 s), with and without
# STINT_PROFILE, compares stdout, stderr and exit status, and reads each profile back with
# `stint report`. One line per program that differs or fails, then a summary.
#
#   tests/sweep.sh                       # /usr/bin and /usr/sbin, --version
#   ARG=--help tests/sweep.sh /usr/bin   # another argument, one directory
#
# Programs that must not be started with an unknown argument (shutdown, mkfs, ...) or that do
# not end by themselves are left out by name. Differences to expect: programs that find their
# data next to their own executable (cmake, gcc-ar) and messages with a pid or a time.
set -u
STINT=${STINT:-$(dirname "$0")/../target/release/stint}
ARG=${ARG:---version}
[ -x "$STINT" ] || { echo "sweep: no stint at $STINT (cargo build --release first)" >&2; exit 2; }
dirs=("$@"); [ ${#dirs[@]} -gt 0 ] || dirs=(/usr/bin /usr/sbin)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/prof" "$work/cwd"
deny='^(shutdown|reboot|halt|poweroff|init|telinit|runlevel|kill|killall|pkill|killall5|rm|rmdir|dd|mkfs.*|mke2fs|fdisk|sfdisk|cfdisk|swapon|swapoff|mkswap|mount|umount|ip|ifconfig|iptables.*|ip6tables.*|xtables.*|nft|sysctl|systemctl|chroot|su|sudo|passwd|login|agetty|getty|runuser|shred|wipefs|useradd|userdel|usermod|groupadd|groupdel|chpasswd|newusers|vipw|vigr|pivot_root|switch_root|blkdiscard|losetup|hwclock|ldconfig|start-stop-daemon|update-.*|dpkg.*|apt.*|debconf.*|reset|tset|clear|chvt|fsck.*|e2fsck|tune2fs|resize2fs|debugfs|badblocks|sulogin|nologin|rtcwake|setsid|nohup|watch|yes|sleep|top|htop|tmux|screen|nginx|redis-server|memcached|postgres.*|sshd|cron|rsyslogd|dockerd|containerd)$'
run() { # run OUT PROGRAM [ENV...]: stdout, stderr and status into $work/OUT.*
    local out=$1 prog=$2; shift 2
    (cd "$work/cwd" && env "$@" timeout -s KILL 5 "$prog" "$ARG" </dev/null >"$work/$out.out" 2>"$work/$out.err"; echo $? >"$work/$out.rc") 2>/dev/null
}
same=0 differ=0 failed=0
for dir in "${dirs[@]}"; do
  for f in "$dir"/*; do
    n=$(basename "$f")
    [[ -L $f || ! -f $f || ! -x $f || $n =~ $deny ]] && continue
    file -b "$f" | grep -q 'ELF 64-bit.*x86-64.*dynamically linked' || continue
    o=$work/bin/$n
    if ! timeout 120 "$STINT" rewrite "$f" -o "$o" --quiet 2>"$work/rw.err"; then
      echo "rewrite failed: $f: $(head -c 300 "$work/rw.err")"; failed=$((failed + 1)); continue
    fi
    bad=""
    for mode in default profile; do
      env=(STINT_SWEEP=1); [[ $mode == profile ]] && env=(STINT_PROFILE="$work/prof/$n.%p.stint")
      run a "$f"; run b "$o" "${env[@]}"
      # The rewritten program's path stands where the original's would in its messages.
      O="$o" F="$f" perl -pi -e 's/\Q$ENV{O}\E/$ENV{F}/g' "$work/b.out" "$work/b.err"
      for k in out err rc; do cmp -s "$work/a.$k" "$work/b.$k" || bad="$bad $mode:$k"; done
    done
    for p in "$work/prof/$n".*.stint; do
      [ -e "$p" ] || continue
      "$STINT" report "$p" >/dev/null 2>"$work/rep.err" || bad="$bad report($(head -c 200 "$work/rep.err"))"
      rm -f "$p"
    done
    rm -f "$o"
    if [ -n "$bad" ]; then
      echo "differs: $f:$bad (exit $(cat "$work/a.rc") / $(cat "$work/b.rc"); $(head -c 160 "$work/b.err" | tr '\n' ' '))"
      differ=$((differ + 1))
    else
      same=$((same + 1))
    fi
  done
done
echo "sweep ($ARG): $same programs behave the same, $differ differ, $failed not rewritten"
[ "$failed" -eq 0 ]
