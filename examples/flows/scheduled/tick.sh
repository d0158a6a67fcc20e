# sandbox
# schedule: @every 2s
# volume: ticks ticks
# next: agent.run.report
#
# Runs every two seconds on exactly one host, however many serve it, and appends to a volume.
date -u +%Y-%m-%dT%H:%M:%SZ >> ticks/log
echo "{\"ticks\": $(wc -l < ticks/log)}"
