# sandbox
# timeout: 30s

def main(name: str = "world"):
    return {"greeting": f"Hello, {name}!"}
