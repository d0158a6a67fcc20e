# sandbox
# next: agent.run.step2
#
# The first step of a two-step chain: its result becomes step2's payload.

def main(n: int):
    print(f"step1 got n={n}")
    return {"n": n + 1, "doubled": n * 2}
