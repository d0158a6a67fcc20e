# sandbox
#
# Fails for orders without an address: its error goes to agent.error.ship, where the handler
# picks it up.

def main(id: str, address: str):
    if not address.strip():
        raise ValueError(f"order {id} has no shipping address")
    return {"id": id, "label": f"SHIP {id} TO {address.upper()}"}
