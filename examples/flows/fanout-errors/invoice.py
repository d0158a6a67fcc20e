# sandbox

def main(id: str, items: list):
    total = sum(item["price"] * item.get("qty", 1) for item in items)
    return {"id": id, "total": round(total, 2)}
