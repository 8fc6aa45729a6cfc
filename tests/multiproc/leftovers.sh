# Sourced by the fault scripts (fault_kill.sh, fault_random.sh, recover.sh) where their jobs are
# about to start: `new_leftovers` then prints each tutti entry in /dev/shm or /tmp that is there
# and was not at that moment, and succeeds only if it printed one (so: check "..." "! new_leftovers").
# A running tuttirun's flight-recorder directory (/tmp/tuttirun-flight.<pid>.*, gone when it exits)
# may belong to another test's job running meanwhile: not a leftover. Other tests' files come and go
# meanwhile (the Gloo peers' store, $TMPDIR/tutti-gloo-bench-*): only an entry that is there after
# the jobs and was not before counts, and not those.
leftover_entries() { ls -A /dev/shm /tmp 2>/dev/null | grep -i tutti | grep -v '^tuttirun-flight\.\|^tutti-gloo-bench-' | sort; }
leftovers_before=$(leftover_entries)
new_leftovers() { comm -13 <(printf '%s\n' "$leftovers_before") <(leftover_entries) | grep -v '^$'; }
