# sandbox
#
# A look at the jail from the inside: who runs, where, and what of the host is there.
shadow=readable
cat /etc/shadow >/dev/null 2>&1 || shadow=unreadable
printf '{"uid":%s,"cwd":"%s","home":"%s","hostname":"%s","pid":%s,"etc_shadow":"%s"}\n' \
  "$(id -u)" "$PWD" "$HOME" "$(cat /proc/sys/kernel/hostname)" "$$" "$shadow"
