# sandbox
# timeout: 30s

# The next step of a large order: a person would be mailed here; the example only says so.


def main(order: int, customer: str, total: float, placed_at: str):
    return {"receipt": f"order {order} for {customer}: {total:.2f}", "placed_at": placed_at}
