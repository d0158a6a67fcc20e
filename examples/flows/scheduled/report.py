# sandbox
# volume: ticks ticks
#
# The follow-up step reads what the scheduled step wrote: the volume is committed before the
# next step is triggered.

def main(ticks: int):
    with open("ticks/log") as f:
        lines = f.read().split()
    return {"ticks_seen": len(lines), "ticks_reported": ticks, "first": lines[0], "last": lines[-1]}
