# sandbox
# on: postgres:orders update delete
# timeout: 30s

# Runs once for each update or delete of an order. old holds the row's key (its primary key),
# or the whole old row under REPLICA IDENTITY FULL; a delete has no row (null), so row and old
# are left untyped: "row: dict" would refuse the null.


def main(table: str, op: str, row, old, lsn: str, xid: int, commit_time: str, schema: str = "public"):
    if op == "delete":
        return {"order": old["id"], "cancelled": True}
    return {"order": row["id"], "qty": row["qty"], "was": old}
