//! The shell side of a shell mount (issue 27): the one script sent when a connection opens,
//! which detects what the target has, defines one function per operation and then serves
//! frames in a loop, and the [`Frame`]s the backend sends to it.
//!
//! What the script relies on: POSIX `sh` and the utilities busybox also has (`dd`, `cat`,
//! `head`, `tail`, `sed`, `find`, `mkdir`, `mv`, `ln`, `rm`, `chmod`, `mktemp`, `cut`, `wc`,
//! `date`, `sha256sum`).
//! `stat -c`, `readlink -f`, `dd iflag=fullblock`, `rg`, `mv -T`/`ln -T` and `setsid` are used
//! when present (detected once, in the opening script) and never required: without `stat -c` a
//! listing has no times, without `readlink -f` a symlink as the last component of a path is
//! refused and listings show no symlink, without `iflag=fullblock` payloads are copied one byte
//! per `read`, without `rg` a search is narrowed by `grep -F` (the same fixed
//! texts, and the UTF-16 BOMs `rg` would have transcoded; where `grep` stops a line at a NUL,
//! files over 8 KiB through `grep -z`, or `tr` over 16 MiB) and by `grep -E` (a rewritten
//! regex, when the opening script finds that `grep -E` tells bytes outside printable ASCII from
//! the rest; where `grep -a` does not see a NUL, files over 8 KiB holding one are found by
//! `tr`), without `-T` a rename checks just before it that no directory took the
//! destination's place, without `setsid` a stopped command's process tree is found in `/proc`.
//!
//! A whole read is bounded on the target: `rd` prints at most the bytes it is given
//! (`head -c`; `read_at_most` asks for one past its limit) and `rw` at most one byte past
//! 8 MiB of a file it found no bigger, so a file that grows between the size check and the
//! read (a log appended to, a file swapped for a big one) is never read whole into memory.
//!
//! A window of a big file (`rw`) starts at the line start the server sends when the file still
//! has the identity it sent with it (its stamp and ctime), else at the file's start; `sk`
//! passes the lines before the window (`head -n N | wc -lc`: the line feeds and bytes passed)
//! and `wn` prints the window. Both reach a line start with `fr`: `dd skip` in 4 KiB blocks
//! (which seeks on a regular file, with GNU and busybox `dd` alike; busybox `tail -c +N` reads
//! through instead) and `tail -c` for the rest of a block, starting one byte early to check
//! that the byte before the line start is a line feed (status 3 when not: the server's start
//! was stale, and the window is found from the file's start). The last line of the answer
//! tells the server the target's clock (read when the identity was not the one sent), the
//! ctime (`ls -c` without `stat -c`), where the window starts (or the line feeds of the whole
//! file, when it ends first), whether a start proved stale, where the target began, how many
//! lines it passed and whether a file that ended first has a last line without a line feed
//! (`marks` in the backend).
//!
//! Files too large to hold in memory (`mountfs cp`) travel in ranges: `rr` prints a byte range
//! (`dd` with `skip`/`count` in 64 KiB blocks, `tail -c +N | head -c N` otherwise) between two
//! version checks; `ub` makes the temporary file of an upload beside the destination (the
//! checks of a write first), `ua` appends one chunk to it and checks its length (by
//! `stat -c %s`, else `ls -ln`: never by reading the file, which made an upload quadratic), `uf` renames
//! it into place under the write's mode (the checks again, in the same script), `ux` removes
//! it; `hs` prints the SHA-256 of a whole file between two version checks (what a range copy
//! compares with the digest of what it read: a big file's version is its `stat` stamp, with
//! nanoseconds where `stat -c %y` shows them, and a change made within one timestamp tick
//! keeps it). A temporary path sent back by the server is accepted only in our own form, inside the
//! mount's directory; it travels as a path does (by its length when it holds a newline: a
//! directory's name may). `pl` tells where a directory is, for `mountfs cp`'s check that the
//! destination is not inside the source: the machine (the kernel's boot id, else the host name
//! and machine id), the physical path of the directory's longest existing ancestor, the rest,
//! and the `device inode` of that ancestor and of each of its parents up to `/` (`stat -c`,
//! else the inode alone by `ls -id`); `md` makes a directory with its parents (`mkdir -p`).
//! A temporary file is named `.mountfs-tmp.<PID>.<random>`, PID being
//! the connection's shell (`$$`): `sw`, run when a mount opens, removes with one `find` those
//! under the mount's directory (following no symbolic link, staying on its file system) that
//! no write in flight can own: older than the minutes it is given, and whose shell is gone
//! (see `ShellBackend::sweep_stale_temp_files`).
//!
//! The frame protocol. The loop reads one line with the `read` builtin (which never reads past
//! the newline on a pipe, so the bytes after it stay for the function) and `eval`s it; the line
//! is always a function name and small integers or one-letter flags made here, never anything
//! an agent gave. Paths, contents, patterns and versions follow on standard input: a path or a
//! version without a newline as one line (read by `read -r`), anything else as exactly N bytes
//! copied by `dd` (the `take` function; busybox `head -c` reads ahead through stdio and would
//! eat the next frame). Every function runs in a subshell `( … )` and, once it has its payload,
//! points its standard input at `/dev/null`, so no command it runs can eat the next frame.
//!
//! No payload byte may ever reach the loop (issue 41: the rest of a grep pattern whose
//! temporary file hit a full disk was run as commands). A payload bound for a file goes
//! through `tw`: `take` copies exactly N bytes into a pipe whose reader, when the write fails
//! (full disk, quota, `ulimit -f`), reads the rest to `/dev/null`, so the count is consumed
//! whatever the sink did; a full file system is status 20 (`NO_SPACE`). Every function that
//! fails before its payload reads it to `/dev/null`. As a second guard the loop runs only
//! lines that begin with the connection's nonce (which no agent knows) and leaves at any
//! other, and a function that cannot prove it read its payload exits 21 (`LOST`): the shell
//! leaves its loop and the server drops the connection.
//!
//! A search (`gp`), a listing (`ls_`) and a glob's walk (`gl`) run in the background under
//! `bw`, whose watcher reads the connection's input: when it ends (the server dropped the
//! connection on a cancel, past the search bound, or at its own end) the watcher stops the search's process tree (found in `/proc`; where
//! there is none, only the search's shell is killed), so nothing keeps running on the target.
//! After each function the loop prints `\n<NONCE>:` … as the answer's end: `\n<NONCE>=STATUS\n`
//! on stdout and `\n<NONCE>\n` on stderr, the nonce being 128 random bits drawn for the
//! connection; `\n<NONCE>:\n` separates the parts of one answer.
//!
//! The answer to the opening script and the loop are one `{ … }` group: a shell parses a group
//! whole before running it, so by the time the answer is out the parser has read every byte of
//! the script and none of the first frame, which the server sends only then (busybox `ash`
//! reads a script from a pipe in blocks: with the loop in a block of its own, the parser could
//! take the first frame's bytes as script text, and the loop waited for a frame forever).
//!
//! Exit statuses name the backend errors ([`status`]); any other status is an I/O error whose
//! message is the function's stderr.

/// Exit statuses of the functions, one per backend error.
pub(super) mod status {
    /// Nothing at the path (or a parent is missing).
    pub(crate) const NOT_FOUND: i32 = 10;
    /// A directory where a file was needed.
    pub(crate) const IS_A_DIRECTORY: i32 = 11;
    /// A file where a directory was needed.
    pub(crate) const NOT_A_DIRECTORY: i32 = 12;
    /// A create-only write or a rename found something at the destination.
    pub(crate) const ALREADY_EXISTS: i32 = 13;
    /// The version check failed.
    pub(crate) const VERSION_MISMATCH: i32 = 14;
    /// The path resolves outside the mount's directory.
    pub(crate) const OUTSIDE: i32 = 15;
    /// A non-recursive delete of a non-empty directory.
    pub(crate) const NOT_EMPTY: i32 = 16;
    /// Not a regular file nor a directory (a FIFO, a device, a socket).
    pub(crate) const UNSUPPORTED: i32 = 17;
    /// The mount's root itself.
    pub(crate) const MOUNT_ROOT: i32 = 18;
    /// A rename's destination is not at the version it must replace.
    pub(crate) const DESTINATION_MISMATCH: i32 = 19;
    /// The target's file system is full (or a quota is reached): a payload could not be
    /// written whole (and was read to its end, never left for the loop).
    pub(crate) const NO_SPACE: i32 = 20;
    /// The function could not prove it read its whole payload (a path by length that did
    /// not come whole): the shell leaves its loop and the server drops the connection.
    pub(crate) const LOST: i32 = 21;
}

/// The opening script. `@NONCE@` is replaced by the connection's nonce (hex digits) before it
/// is sent; nothing else is ever put into it. It prints one `caps` line, the end of an answer,
/// and then serves frames until its standard input ends.
pub(super) const BOOTSTRAP: &str = r#"L0=${LC_ALL-}; L1=${LC_ALL+1}; LC_ALL=C; export LC_ALL; unset CDPATH; N=@NONCE@; R=
if command -v sha256sum >/dev/null 2>&1; then HS=1; else HS=0; fi
if stat -L -c %f / >/dev/null 2>&1; then ST=1; else ST=0; fi
SF='%f %s %Y %Z %i %d'
if [ "$ST" = 1 ]; then case $(stat -L -c %y / 2>/dev/null) in *:*.[0-9]*) SF="$SF %y %z";; esac; fi
if dd if=/dev/null of=/dev/null count=0 iflag=fullblock 2>/dev/null; then FB=1; else FB=0; fi
if readlink -f / >/dev/null 2>&1; then RL=1; else RL=0; fi
if command -v rg >/dev/null 2>&1; then RG=1; else RG=0; fi
W=$(printf '[^\t -~]'); GX=0; GA=0
if [ "$RG" = 0 ] && printf 'a\351b\n' | grep -q -E "$W" 2>/dev/null && printf 'a\rb\n' | grep -q -E "$W" 2>/dev/null \
  && printf 'a\001b\n' | grep -q -E "$W" 2>/dev/null && ! printf '\ta ~\n' | grep -q -E "$W" 2>/dev/null; then
  GX=1; if printf 'a\000b\n' | grep -a -q -E "$W" 2>/dev/null; then GA=1; fi
fi
if printf 'a\000b\n' | grep -q -F b 2>/dev/null; then GZ=1
elif printf 'a\000b\n' | grep -z -q -F b 2>/dev/null; then GZ=z; else GZ=0; fi
if command -v mktemp >/dev/null 2>&1; then MT=1; else MT=0; fi
if mv --help 2>&1 | grep -q -e '-[a-zA-Z]*T'; then MV=1; else MV=0; fi
if ln --help 2>&1 | grep -q -e '-[a-zA-Z]*T'; then LT=1; else LT=0; fi
sep() { printf '\n%s:\n' "$N"; }
take() {
  [ "$1" -gt 0 ] || return 0
  if [ "$FB" = 1 ]; then
    q=$(($1 / 65536)); r=$(($1 % 65536))
    if [ "$q" -gt 0 ]; then dd bs=65536 count="$q" iflag=fullblock 2>/dev/null || return 1; fi
    if [ "$r" -gt 0 ]; then dd bs="$r" count=1 iflag=fullblock 2>/dev/null || return 1; fi
  else
    dd bs=1 count="$1" 2>/dev/null
  fi
}
rl() { IFS= read -r "$1" || exit 1; }
tw() {
  take "$1" | ( if [ "$3" = a ]; then o=$(cat 2>&1 >>"$2"); else o=$(cat 2>&1 >"$2"); fi && exit 0
    e=$?; cat >/dev/null
    case $o in *"No space"*|*"quota"*|*"Quota"*) exit 20;; esac
    printf '%s\n' "${o:-the write stopped (status $e; a file size limit, ulimit -f?)}" >&2; exit 1 )
}
takef() { tw "$1" "$2" || return $?; c=$(wc -c < "$2") || return 1; [ $((c)) -eq "$1" ]; }
rp() { if [ "$1" = l ]; then rl p; else p=$(take "$1"; echo .); p=${p%.}; [ "${#p}" -eq "$1" ] || exit 21; fi; }
ck() { [ "$R" = / ] && return 0; case "$1" in "$R"|"$R"/*) return 0;; esac; return 1; }
jn() { if [ "$1" = / ]; then f=/$2; else f=$1/$2; fi; }
sp() { case "$1" in */*) pd=${1%/*}; b=${1##*/};; *) pd=; b=$1;; esac; }
rs() {
  sp "$p"
  cd -P -- "$R/$pd" 2>/dev/null || return 10
  d=$PWD; ck "$d" || return 15
  if [ -z "$b" ]; then f=$d; else jn "$d" "$b"; fi
}
fw() {
  [ -n "$b" ] && [ -L "$f" ] || return 0
  [ "$RL" = 1 ] || return 15
  t=$(readlink -f -- "$f") || return 10
  ck "$t" || return 15
  f=$t
}
rsf() { rs || return $?; fw; }
if [ "$ST" = 1 ]; then
  me() { stat -L -c "$SF" -- "$@" 2>/dev/null; }
else
  me() { for x; do ls -lnidL --full-time -- "$x" 2>/dev/null | { read -r i m l u g s dt tm tz r || exit 1; case $m in d*) t=4000;; -*) t=8000;; *) t=0;; esac; echo "$t $s D${dt}T$tm$tz 0 $i 0"; } || return 1; done; }
fi
if [ "$ST" = 1 ]; then sz() { stat -L -c %s -- "$1"; }
else sz() { set -- $(ls -lnd -- "$1") || return 1; [ -n "$5" ] || return 1; printf '%s\n' "$5"; }; fi
mm() { [ $# -gt 0 ] || return 0; o=$(me "$@") && printf '%s\n' "$o" && return 0; for x; do me "$x" || echo X; done; }
vr() {
  set -- "$1" $(me "$1")
  [ -n "$3" ] || return 1
  if [ "$3" -le 8388608 ]; then sha256sum < "$1" | cut -c1-32
  else x="$7:$6:$3:$4:$5"; shift 7; [ $# -eq 0 ] || x="$x:$*"; printf i; printf '%s' "$x" | sha256sum | cut -c1-32; fi
}
mk() {
  if [ "$MT" = 1 ]; then mktemp "$1/.mountfs-tmp.$$.XXXXXX"; return; fi
  k=0
  while [ "$k" -lt 100 ]; do
    t=$1/.mountfs-tmp.$$.$k
    if ( set -C; : > "$t" ) 2>/dev/null; then printf '%s\n' "$t"; return 0; fi
    k=$((k + 1))
  done
  return 1
}
mkp() {
  cd -P -- "$R" || return 1
  rest=$1
  while [ -n "$rest" ]; do
    case "$rest" in */*) c=${rest%%/*}; rest=${rest#*/};; *) c=$rest; rest=;; esac
    if [ -d "$c" ]; then cd -P -- "./$c" || return 1; ck "$PWD" || return 15
    elif [ -e "$c" ] || [ -L "$c" ]; then return 12
    else mkdir -- "./$c" 2>/dev/null || [ -d "$c" ] || return 1; cd -P -- "./$c" || return 1; fi
  done
  d=$PWD; ck "$d" || return 15
}
il() { [ "$RL" = 1 ] || return 1; t=$(readlink -f -- "$1") || return 1; ck "$t"; }
gr() {
  if [ -e "$1" ] || [ -L "$1" ]; then :; else shift $#; fi
  if [ $# -gt 0 ]; then
    printf '%s\0' "$@"; sep
    mm "$@" | { for x; do IFS= read -r m || m=X; if [ -L "$x" ] && ! il "$x"; then m=X; fi; printf '%s\n' "$m"; done; }
  else sep; fi
  sep
}
mvt() {
  if [ "$MV" = 1 ]; then mv -f -T "$1" "$2"; return; fi
  [ -d "$2" ] && return 2
  mv -f "$1" "$2"
}
lnt() {
  if [ "$LT" = 1 ]; then ln -T "$1" "$2"; return; fi
  { [ -e "$2" ] || [ -L "$2" ]; } && return 1
  ln "$1" "$2"
}
init() {
  rp "$1"
  cd -P -- "$p" 2>/dev/null || { echo "cannot enter the directory (missing, not a directory, or no permission)" >&2; return 1; }
  R=$PWD; printf '%s' "$R"
}
st() ( rp "$1"; exec </dev/null; rsf || exit $?; [ -e "$f" ] || exit 10; me "$f" || exit 10 )
sl() ( rp "$1"; exec </dev/null; rs || exit $?; if [ -n "$b" ] && [ -L "$f" ]; then echo 1; else echo 0; fi )
ls_() (
  rp "$1"; rsf || exit $?
  [ -e "$f" ] || exit 10; [ -d "$f" ] || exit 12
  cd -P -- "$f" || exit 1; ck "$PWD" || exit 15
  bw lw
)
lw() { gr ./*; gr ./.[!.]*; gr ./..?*; }
rd() (
  rp "$1"; lm=$2; exec </dev/null; rsf || exit $?
  [ -e "$f" ] || exit 10; [ -d "$f" ] && exit 11; [ -f "$f" ] || exit 17
  me "$f" || exit 10; sep; if [ "$lm" = - ]; then cat "$f"; else head -c "$lm" "$f"; fi
)
if [ "$ST" = 1 ]; then mc() { :; }
else mc() { ls -lnidLc --full-time -- "$1" 2>/dev/null | { read -r i m l u g s dt tm tz r || exit 1; echo "D${dt}T$tm$tz"; }; }; fi
fr() {
  q=$((($1 - 1) / 4096)); r=$((($1 - 1) % 4096))
  if [ "$r" -eq 0 ]; then dd if="$f" bs=4096 skip="$q" 2>/dev/null
  else dd if="$f" bs=4096 skip="$q" 2>/dev/null | tail -c +$((r + 1)); fi
}
sk() {
  if [ "$1" -eq 0 ]; then head -n "$2" "$f" | wc -lc
  else fr "$1" | { IFS= read -r x && [ -z "$x" ] || exit 3; head -n "$2" | wc -lc; }; fi
}
wn() {
  if [ "$1" -eq 0 ]; then head -n "$n" "$f" | cut -b 1-262144
  else fr "$1" | { IFS= read -r x && [ -z "$x" ] || exit 3; head -n "$n" | cut -b 1-262144; }; fi
}
rw() (
  rp "$1"; a=$2; z=$3; B=${4:-0}; L=${5:-0}; ek=; if [ "$B" -gt 0 ]; then rl ek; fi
  exec </dev/null; rsf || exit $?
  [ -e "$f" ] || exit 10; [ -d "$f" ] && exit 11; [ -f "$f" ] || exit 17
  set -- $(me "$f"); [ -n "$2" ] || exit 10
  printf '%s' "$*"; sep
  if [ "$2" -le 8388608 ]; then head -c 8388609 "$f"; exit 0; fi
  if [ "$ST" = 1 ]; then ct=$4; else ct=$(mc "$f"); fi
  nw=-; if [ "$* $ct" != "$ek" ]; then B=0; L=0; nw=$(date +%s 2>/dev/null); fi
  head -c 8192 "$f"; sep
  n=$((z - a + 1)); s=k; b0=$B; pa=0; t=0
  while :; do
    m=$((a - 1 - L))
    if [ "$m" -lt 0 ]; then B=0; L=0; continue; fi
    if [ "$m" -gt 0 ]; then
      o=$(sk "$B" "$m"); e=$?
      if [ "$e" = 3 ] && [ "$B" -gt 0 ]; then s=x; B=0; L=0; continue; fi
      [ "$e" = 0 ] || exit 1
      set -- $o; L=$((L + $1)); B=$((B + $2)); pa=$((pa + m))
      if [ "$L" -lt $((a - 1)) ]; then
        [ "$B" -gt 0 ] && set -- $(dd if="$f" bs=1 skip=$((B - 1)) count=1 2>/dev/null | wc -l) && t=$((1 - ${1:-1}))
        break
      fi
    fi
    wn "$B"; e=$?
    [ "$e" = 0 ] && break
    [ "$e" = 3 ] && [ "$B" -gt 0 ] || exit 1
    s=x; B=0; L=0
  done
  sep; printf '%s %s %s %s %s %s %s %s' "${nw:--}" "${ct:--}" "$L" "$B" "$s" "$b0" "$pa" "$t"
)
wl() ( rp "$1"; exec </dev/null; rsf || exit $?; [ -f "$f" ] || exit 10; wc -l < "$f" )
wp() {
  sp "$p"; [ -n "$b" ] || return 11
  if [ "$m" = v ]; then cd -P -- "$R/$pd" 2>/dev/null || return 14; d=$PWD; ck "$d" || return 15
  else mkp "$pd" || return $?; fi
  jn "$d" "$b"
  if [ -L "$f" ]; then fw || return $?; d=${f%/*}; [ -n "$d" ] || d=/; fi
  [ -d "$f" ] && return 11
  x=0; if [ -e "$f" ]; then x=1; [ -f "$f" ] || return 17; fi
  case $m in c) [ "$x" = 1 ] && return 13;; v) [ "$x" = 1 ] || return 14;; esac
  return 0
}
wr1() {
  wp || return $?
  t=$(mk "$d") || return 1
  got=1; takef "$n" "$t" || { e=$?; rm -f "$t"; return "$e"; }
  exec </dev/null
  wf
}
wf() {
  if [ "$x" = 1 ] && [ "$ST" = 1 ]; then chmod "$(stat -c %a "$f")" "$t" 2>/dev/null
  else chmod "$(printf '%o' $(( 0666 & ~$(umask) )))" "$t" 2>/dev/null; fi
  case $m in
    c) if lnt "$t" "$f" 2>/dev/null; then rm -f "$t"; else
         { [ -e "$f" ] || [ -L "$f" ]; } && { rm -f "$t"; return 13; }
         mvt "$t" "$f"; e=$?; [ "$e" = 0 ] || { rm -f "$t"; [ "$e" = 2 ] && return 13; return 1; }; fi;;
    o) mvt "$t" "$f"; e=$?; [ "$e" = 0 ] || { rm -f "$t"; [ "$e" = 2 ] && return 11; return 1; };;
    v) [ "$(vr "$f")" = "$ev" ] || { rm -f "$t"; return 14; }
       mvt "$t" "$f"; e=$?; [ "$e" = 0 ] || { rm -f "$t"; [ "$e" = 2 ] && return 14; return 1; };;
  esac
  echo "$x"; me "$f"
}
wr() ( rp "$1"; n=$2; m=$3; got=0; if [ "$m" = v ]; then rl ev; fi
  wr1; e=$?; [ "$got" = 1 ] || take "$n" >/dev/null; exit $e )
tv() {
  case "$t" in */../*|*/./*) return 1;; esac
  case "${t##*/}" in .mountfs-tmp.*) ;; *) return 1;; esac
  td=${t%/*}; [ -n "$td" ] || td=/
  ck "$td" && [ -f "$t" ] && [ ! -L "$t" ]
}
rr() ( rp "$1"; a=$2; n=$3; rl ev; exec </dev/null; rsf || exit $?
  [ -e "$f" ] || exit 10; [ -d "$f" ] && exit 11; [ -f "$f" ] || exit 17
  [ "$(vr "$f")" = "$ev" ] || exit 14
  if [ $((a % 65536)) -eq 0 ] && [ $((n % 65536)) -eq 0 ]; then
    dd if="$f" bs=65536 skip=$((a / 65536)) count=$((n / 65536)) 2>/dev/null || exit 1
  else tail -c +$((a + 1)) "$f" | head -c "$n"; fi
  sep; vr "$f" )
hs() ( rp "$1"; rl ev; exec </dev/null; rsf || exit $?
  [ -e "$f" ] || exit 10; [ -d "$f" ] && exit 11; [ -f "$f" ] || exit 17
  [ "$(vr "$f")" = "$ev" ] || exit 14
  sha256sum < "$f" | cut -c1-64; sep; vr "$f" )
ub() ( rp "$1"; m=$2; if [ "$m" = v ]; then rl ev; fi; exec </dev/null
  wp || exit $?
  if [ "$m" = v ]; then [ "$(vr "$f")" = "$ev" ] || exit 14; fi
  t=$(mk "$d") || exit 1
  printf '%s' "$t" )
ua() ( n=$1; z=$2; rp "$3"; t=$p
  tv || { take "$n" >/dev/null; exit 1; }
  tw "$n" "$t" a || exit $?
  exec </dev/null
  c=$(sz "$t") || exit 1; [ $((c)) -eq "$z" ] )
uf() ( rp "$1"; fp=$p; m=$2; if [ "$m" = v ]; then rl ev; fi; rp "$3"; t=$p; p=$fp; exec </dev/null
  tv || exit 1
  wp || { e=$?; rm -f "$t"; exit "$e"; }
  td=${t%/*}; [ -n "$td" ] || td=/
  [ "$td" = "$d" ] || { rm -f "$t"; exit 1; }
  wf )
ux() ( rp "$1"; t=$p; exec </dev/null; tv || exit 0; rm -f "$t" )
dl() (
  rp "$1"; r=$2; if [ "$3" = v ]; then rl ev; fi; exec </dev/null
  rs || exit $?; [ -n "$b" ] || exit 18
  [ -e "$f" ] || [ -L "$f" ] || exit 10
  if [ -d "$f" ] && [ ! -L "$f" ]; then
    [ "$3" = v ] && exit 11
    if [ "$r" = 1 ]; then rm -rf "$f" || exit 1
    else rmdir "$f" 2>/dev/null || { [ -d "$f" ] && exit 16; exit 1; }; fi
  else
    if [ "$3" = v ]; then [ "$(vr "$f")" = "$ev" ] || exit 14; fi
    rm -f "$f" || exit 1
  fi
)
mv_() (
  rp "$1"; fp=$p; rp "$2"; tp=$p
  if [ "$3" = v ]; then rl fv; fi; if [ "$4" = v ]; then rl tv; fi
  exec </dev/null
  p=$fp; rs || exit $?; [ -n "$b" ] || exit 18; s=$f
  [ -e "$s" ] || [ -L "$s" ] || exit 10
  k=f; if [ -d "$s" ] && [ ! -L "$s" ]; then k=d; fi
  if [ "$3" = v ]; then [ "$k" = f ] || exit 11; [ "$(vr "$s")" = "$fv" ] || exit 14; fi
  sp "$tp"; [ -n "$b" ] || exit 18
  mkp "$pd" || exit $?
  jn "$d" "$b"
  if [ -e "$f" ] || [ -L "$f" ]; then
    if [ -d "$f" ] && [ ! -L "$f" ]; then exit 11; fi
    [ "$4" = v ] || exit 13
    [ "$k" = d ] && exit 13
    [ "$(vr "$f")" = "$tv" ] || exit 19
  elif [ "$4" = v ]; then exit 19; fi
  mvt "$s" "$f"; e=$?; [ "$e" = 0 ] || { [ "$e" = 2 ] && exit 19; exit 1; }
  echo "$k"; if [ "$k" = f ]; then vr "$f"; fi
)
sm() ( rp "$1"; fp=$p; rp "$2"; tp=$p; exec </dev/null
  p=$fp; rsf || exit $?; me "$f" || exit 10; sep; p=$tp; rsf || exit $?; me "$f" || exit 10 )
zs() {
  [ $# -gt 0 ] || return 0
  if [ "$ST" = 1 ]; then o=$(stat -L -c %s -- "$@" 2>/dev/null) && printf '%s\n' "$o" && return 0; fi
  for x; do if [ "$ST" = 1 ]; then stat -L -c %s -- "$x" 2>/dev/null || echo X; else wc -c < "$x" 2>/dev/null || echo X; fi; done
}
rm_() (
  n=$1; big=$2; bud=$3; shift $#; i=0
  while [ "$i" -lt "$n" ]; do rl x; set -- "$@" "$x"; i=$((i + 1)); done
  exec </dev/null
  fl=; for p; do if rsf && [ -f "$f" ]; then set -- "$@" "$f"; fl="${fl}1"; else fl="${fl}0"; fi; done
  shift "$n"; k=$#; sz="$(zs "$@")
"; tot=0; dc=; ss=
  for f; do
    s=${sz%%"
"*}; sz=${sz#*"
"}
    case $s in ''|*[!0-9\ ]*) dc="${dc}0"; continue;; esac
    if [ $((s)) -gt "$big" ]; then dc="${dc}2"
    elif [ $((tot + s)) -gt "$bud" ]; then dc="${dc}3"
    else dc="${dc}1"; tot=$((tot + s)); ss="$ss$((s))
"; set -- "$@" "$f"; fi
  done
  shift "$k"
  while [ -n "$fl" ]; do
    c=${fl%"${fl#?}"}; fl=${fl#?}
    if [ "$c" = 1 ]; then c=${dc%"${dc#?}"}; dc=${dc#?}; fi
    echo "$c"
  done
  sep; printf '%s' "$ss"; sep
  [ $# -eq 0 ] || cat "$@" 2>/dev/null | head -c "$tot"
  sep; zs "$@"
)
gk() (
  rp "$1"; exec </dev/null; rsf || exit $?
  [ -e "$f" ] || exit 10; [ -d "$f" ] && exit 11; [ -f "$f" ] || exit 17
  me "$f" || exit 10; sep
  dd if="$f" bs=65536 skip="$2" count="$3" 2>/dev/null
)
pl() (
  rp "$1"; exec </dev/null; t=
  while ! cd -P -- "$p" 2>/dev/null; do
    case "$p" in /*/*) t=${p##*/}/$t; p=${p%/*};; /?*) t=${p#/}/$t; p=/;; *) exit 10;; esac
  done
  if IFS= read -r m 2>/dev/null </proc/sys/kernel/random/boot_id && [ -n "$m" ]; then printf 'boot %s' "$m"
  else printf 'host %s ' "$(uname -n 2>/dev/null)"; cat /etc/machine-id 2>/dev/null; fi
  sep; printf '%s' "$PWD"; sep; printf '%s' "$t"; sep
  while :; do
    if [ "$ST" = 1 ]; then stat -c '%d %i' . || exit 1; else set -- $(ls -id .); echo "- $1"; fi
    [ "$PWD" = / ] && break
    cd -P .. || exit 1
  done
)
md() ( rp "$1"; exec </dev/null; mkdir -p -- "$p" || exit 1; cd -P -- "$p" || exit 1 )
sw() ( exec </dev/null; cd -P -- "$R" || exit 1
  if [ -d /proc/self ]; then pc=1; else pc=0; fi
  find . -xdev -type f -name '.mountfs-tmp.*' -mmin +"$1" -exec sh -c '
    P=$1; n=0; shift
    for x; do
      w=${x##*/.mountfs-tmp.}; w=${w%%.*}
      case $w in ""|*[!0-9]*) ;; *)
        if [ "$P" = 1 ] && IFS= read -r s < "/proc/$w/stat" 2>/dev/null; then
          s=${s##*) }; case $s in Z*|X*) ;; *) continue;; esac
        fi;;
      esac
      rm -f -- "$x" && n=$((n + 1))
    done
    echo "$n"' sh "$pc" {} + 2>/dev/null
  exit 0 )
vs() ( rp "$1"; exec </dev/null; rsf || exit $?; [ -e "$f" ] || exit 10; [ -d "$f" ] && exit 11; [ -f "$f" ] || exit 17; vr "$f" )
wt() ( exec </dev/null; if [ -d "$R" ] && [ -w "$R" ]; then echo 1; else echo 0; fi )
cm() ( rp "$1"; exec </dev/null; rsf || exit $?; [ -f "$f" ] || exit 10; chmod "$2" "$f" || exit 1; me "$f" )
gl() (
  rp "$1"; rsf || exit $?
  [ -e "$f" ] || exit 10
  if [ -f "$f" ]; then echo F; me "$f"; exit 0; fi
  [ -d "$f" ] || exit 10; cd -P -- "$f" || exit 1; ck "$PWD" || exit 15
  echo D
  bw gw
)
gw() {
  find . -name .git -prune -o -type f ! -name '.mountfs-tmp.*' -exec sh -c '
    S=$1; F=$2; shift 2
    printf "%s\0" "$@"; printf "\0"
    if [ "$S" = 1 ]; then
      o=$(stat -c "$F" -- "$@" 2>/dev/null) && printf "%s\n" "$o" || for x; do stat -c "$F" -- "$x" 2>/dev/null || echo X; done
    else
      for x; do ls -lnid --full-time -- "$x" 2>/dev/null | { read -r i m l u g s dt tm tz r && echo "8000 $s D${dt}T$tm$tz 0 $i 0"; } || echo X; done
    fi' sh "$ST" "$SF" {} +
}
gp() (
  rp "$1"; pl=$2; md=$3; big=$5
  rsf; e=$?
  if [ "$e" = 0 ] && [ -d "$f" ] && cd -P -- "$f" && ck "$PWD"; then :; else take "$pl" >/dev/null; exit 10; fi
  if pf=$(mk "${TMPDIR:-/tmp}" 2>/dev/null); then takef "$pl" "$pf"; e=$?; else take "$pl" >/dev/null; e=1; fi
  if [ "$e" != 0 ]; then rm -f "$pf"; exec </dev/null; sep; printf E; sep; sep; exit 0; fi
  tl=$4; bw gs
  e=$?; rm -f "$pf"; exit "$e"
)
gs() {
  case $md in i) fl="-F -i";; *) fl=-F;; esac
  m=
  if [ "$tl" = r ]; then
    if [ "$md" = x ]; then ra="-a -E none"; else ra="--binary $fl"; fi
    rg -l -0 --no-messages --hidden --no-ignore --no-config $ra -g '!.git' -g '!.mountfs-tmp.*' -f "$pf" -- . 2>/dev/null
    [ $? -le 1 ] || m=E
  elif [ "$md" = x ]; then
    ga=; [ "$GA" = 1 ] && ga=-a
    o=$(grep $ga -E -f "$pf" /dev/null 2>&1); [ $? -le 1 ] && [ -z "$o" ] || m=E
    if [ -z "$m" ]; then
      find . -name .git -prune -o -type f ! -name '.mountfs-tmp.*' -exec grep $ga -l -E -f "$pf" -- {} + 2>/dev/null
      [ "$GA" = 1 ] || find . -name .git -prune -o -type f ! -name '.mountfs-tmp.*' -size +8192c -exec sh -c '
        for x; do case $(tr -cd "\000" < "$x" | head -c 1 | wc -c) in *[1-9]*) printf "%s\n" "$x";; esac; done' sh {} + 2>/dev/null
    fi
  elif [ "$GZ" = 1 ]; then
    find . -name .git -prune -o -type f ! -name '.mountfs-tmp.*' -exec grep -l $fl -f "$pf" -- {} + 2>/dev/null
  else
    find . -name .git -prune -o -type f ! -name '.mountfs-tmp.*' ! -size +8k -exec grep -l $fl -f "$pf" -- {} + 2>/dev/null
    if [ "$GZ" = z ]; then mz=16384k; else mz=8k; fi
    find . -name .git -prune -o -type f ! -name '.mountfs-tmp.*' -size +8k ! -size +$mz -exec grep -z -l $fl -f "$pf" -- {} + 2>/dev/null
    find . -name .git -prune -o -type f ! -name '.mountfs-tmp.*' -size +$mz -exec sh -c '
      P=$1; G=$2; shift 2
      for x; do tr "\000" "\n" < "$x" | grep -q $G -f "$P" && printf "%s\n" "$x"; done' sh "$pf" "$fl" {} + 2>/dev/null
  fi
  sep; printf '%s' "$m"; sep
  [ "$tl" = r ] || find . -name .git -prune -o -type f -path '*
*' -print0 2>/dev/null
  sep
  find . -name .git -prune -o -type f ! -name '.mountfs-tmp.*' -size +"$big"c -print0 2>/dev/null
  return 0
}
ds() {
  l=" $1 "; ch=1
  [ -r "/proc/$1/stat" ] || { echo "$1"; return; }
  while [ "$ch" = 1 ]; do
    ch=0
    for st_ in /proc/[0-9]*/stat; do
      IFS= read -r x < "$st_" 2>/dev/null || continue
      q=${x%% *}; x=${x##*) }; x=${x#* }; pp=${x%% *}
      case "$l" in *" $q "*) ;; *" $pp "*) l="$l$q "; ch=1;; esac
    done
  done
  echo ${l# $1 } $1
}
bw() {
  exec 3<&0 </dev/null
  "$@" 3<&- &
  k=$!
  ( IFS= read -r x; kill -STOP "$k"; l=$(ds "$k"); kill -STOP $l; l=$(ds "$k"); kill -KILL $l ) <&3 >/dev/null 2>&1 &
  w=$!; exec 3<&-
  wait "$k"; s=$?
  kill "$w" 2>/dev/null; wait "$w" 2>/dev/null
  return "$s"
}
ex() (
  rp "$1"; n=$2; rsf; e=$?
  if [ "$e" = 0 ]; then if [ ! -e "$f" ]; then e=10; elif [ ! -d "$f" ]; then e=12; fi; fi
  [ "$e" = 0 ] || { take "$n" >/dev/null; exit "$e"; }
  c=$(take "$n"; echo .); c=${c%.}
  [ "${#c}" -eq "$n" ] || exit 1
  cd -P -- "$f" || exit 1; ck "$PWD" || exit 15
  if [ -n "$L1" ]; then LC_ALL=$L0; else unset LC_ALL; fi
  exec 3<&0 </dev/null
  sep
  if command -v setsid >/dev/null 2>&1; then setsid sh -c "$c" 3<&- &
  else set -m 2>/dev/null; sh -c "$c" 3<&- & fi
  k=$!; set +m 2>/dev/null
  ( IFS= read -r x
    if kill -TERM -"$k" 2>/dev/null; then sleep 2; kill -KILL -"$k"
    else l=$(ds "$k"); kill -STOP $l; l=$(ds "$k"); kill -STOP $l
      kill -TERM $l; kill -CONT $l; ( sleep 2; kill -KILL $l ) </dev/null & fi ) <&3 >/dev/null 2>&1 &
  w=$!; exec 3<&-
  wait "$k"; s=$?
  kill "$w" 2>/dev/null; wait "$w" 2>/dev/null; kill -KILL -"$k" 2>/dev/null
  exit "$s"
)
{
printf 'caps hs=%s st=%s fb=%s rl=%s rg=%s mt=%s mv=%s ln=%s gx=%s\n' "$HS" "$ST" "$FB" "$RL" "$RG" "$MT" "$MV" "$LT" "$GX"
printf '\n%s\n' "$N" >&2; printf '\n%s=0\n' "$N"
while IFS= read -r l; do case $l in "$N "*) ;; *) exit 1;; esac; eval "${l#"$N "}"; s=$?; printf '\n%s\n' "$N" >&2; printf '\n%s=%d\n' "$N" "$s"; [ "$s" != 21 ] || exit 1; done
}
"#;

/// One call: the line the loop `eval`s and the payload that follows it on standard input.
#[derive(Debug, Default, Clone)]
pub(super) struct Frame {
    /// The function and its arguments so far (only names, integers and flags made here).
    line: String,
    /// What follows the line.
    payload: Vec<u8>,
}

impl Frame {
    /// A call of the shell function `function`.
    pub(super) fn call(function: &'static str) -> Self {
        Self {
            line: function.to_owned(),
            payload: Vec::new(),
        }
    }

    /// A path (relative to the mount's directory, no leading `/`; empty for the root) as the
    /// next payload: as one line when it has no newline (`l`), else as its length in bytes.
    pub(super) fn path(mut self, relative: &str) -> Self {
        if relative.contains('\n') {
            self.line.push_str(&format!(" {}", relative.len()));
            self.payload.extend_from_slice(relative.as_bytes());
        } else {
            self.line.push_str(" l");
            self.payload.extend_from_slice(relative.as_bytes());
            self.payload.push(b'\n');
        }
        self
    }

    /// An integer or a flag word made here (never anything an agent gave).
    pub(super) fn arg(mut self, word: impl std::fmt::Display) -> Self {
        self.line.push_str(&format!(" {word}"));
        self
    }

    /// Bytes the function copies by a length given among its arguments.
    pub(super) fn raw(mut self, bytes: &[u8]) -> Self {
        self.payload.extend_from_slice(bytes);
        self
    }

    /// A line of the payload read with `read -r`: a path without a line break (callers send
    /// those by length, see [`Frame::path`]). A text with one is sent as the empty line, which
    /// names no file: its rest never becomes the next frame.
    pub(super) fn line_payload(mut self, text: &str) -> Self {
        if !text.contains('\n') {
            self.payload.extend_from_slice(text.as_bytes());
        }
        self.payload.push(b'\n');
        self
    }

    /// A version the function compares with the file's (hex digits and `i`, as the target's
    /// script prints them). Anything else is sent as `-`, which no version equals: the check
    /// fails and nothing else happens.
    pub(super) fn version(mut self, text: &str) -> Self {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_alphanumeric()) {
            self.payload.extend_from_slice(b"-");
        } else {
            self.payload.extend_from_slice(text.as_bytes());
        }
        self.payload.push(b'\n');
        self
    }

    /// The bytes to write to the shell: the connection's nonce and a space (the loop runs no
    /// line without them), the line, then the payload.
    pub(super) fn into_bytes(self, nonce: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(nonce.len() + 2 + self.line.len() + self.payload.len());
        out.extend_from_slice(nonce.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.line.as_bytes());
        out.push(b'\n');
        out.extend(self.payload);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_line(bytes: &[u8]) -> &str {
        let end = bytes.iter().position(|b| *b == b'\n').unwrap();
        std::str::from_utf8(&bytes[..end]).unwrap()
    }

    /// The body of the opening script's function `name`, up to the function `next`.
    fn function_body(name: &str, next: &str) -> &'static str {
        BOOTSTRAP
            .split(&format!("\n{name}() ("))
            .nth(1)
            .and_then(|rest| rest.split(&format!("\n{next}() (")).next())
            .unwrap()
    }

    #[test]
    fn the_line_holds_only_names_and_numbers_and_payloads_follow_it() {
        let bytes = Frame::call("wr")
            .path("$(touch x)/`id` it's.txt")
            .arg(5)
            .arg("v")
            .version("abc123")
            .raw(b"hello")
            .into_bytes("N");
        assert_eq!(first_line(&bytes), "N wr l 5 v");
        assert!(bytes.ends_with(b"\n$(touch x)/`id` it's.txt\nabc123\nhello"));
        // A path with a newline goes by its length, never as a line.
        let bytes = Frame::call("rd").path("a\nb").arg("-").into_bytes("N");
        assert_eq!(first_line(&bytes), "N rd 3 -");
        assert_eq!(&bytes[9..], b"a\nb");
    }

    #[test]
    fn a_line_payload_never_carries_a_second_line() {
        let bytes = Frame::call("dl")
            .path("a")
            .version("0123abc\ntouch pwned")
            .into_bytes("N");
        assert_eq!(bytes, b"N dl l\na\n-\n");
        let bytes = Frame::call("dl")
            .path("a")
            .version("i0123abc")
            .into_bytes("N");
        assert_eq!(bytes, b"N dl l\na\ni0123abc\n");
        let bytes = Frame::call("rm_")
            .arg(2)
            .line_payload("x/a b.txt")
            .line_payload("c\nd")
            .into_bytes("N");
        assert_eq!(bytes, b"N rm_ 2\nx/a b.txt\n\n");
    }

    #[test]
    fn no_helper_process_is_given_the_nonce() {
        // Only builtins (printf) ever see $N: it is never an argument of a command, nor exported.
        assert!(!BOOTSTRAP.contains("\"$N\" \"$ST\""));
        assert!(!BOOTSTRAP.contains("export N"));
        for line in BOOTSTRAP.lines().filter(|line| line.contains("$N")) {
            assert!(line.contains("printf"), "{line}");
        }
    }

    #[test]
    fn an_upload_chunk_checks_the_length_without_reading_the_file() {
        // `wc -c < temp` read the whole temporary file at every chunk: quadratic uploads.
        let ua = function_body("ua", "uf");
        assert!(!ua.contains("wc "), "{ua}");
        assert!(ua.contains("sz \"$t\""), "{ua}");
    }

    #[test]
    fn the_sweep_uses_only_what_busybox_find_has_and_follows_no_link() {
        let sw = function_body("sw", "vs");
        // Debian's busybox 1.35 `find` has neither `-delete` nor `-printf`; `-L`/`-follow`
        // would walk out of the directory through a link.
        for absent in ["-delete", "-printf", "-L ", "-follow", "-execdir"] {
            assert!(!sw.contains(absent), "{absent} in {sw}");
        }
        assert!(sw.contains("find . -xdev -type f -name '.mountfs-tmp.*' -mmin +\"$1\""));
        // Names reach `rm` as arguments, never as text to parse.
        assert!(sw.contains("rm -f -- \"$x\""), "{sw}");
    }

    #[test]
    fn the_opening_script_puts_only_the_nonce_into_its_text() {
        assert_eq!(BOOTSTRAP.matches("@NONCE@").count(), 1);
        // The loop runs only lines led by the nonce, and leaves at any other.
        assert!(BOOTSTRAP.contains(
            "while IFS= read -r l; do case $l in \"$N \"*) ;; *) exit 1;; esac; eval \"${l#\"$N \"}\""
        ));
    }
}
