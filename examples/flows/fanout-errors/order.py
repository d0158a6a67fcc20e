# sandbox
# next: agent.run.invoice
# next: agent.run.ship
#
# Fan-out: each order goes to invoicing and to shipping at once.

def main(id: str, items: list, address: str = ""):
    return {"id": id, "items": items, "address": address}
