# sandbox
# on: postgres:orders insert
# next: agent.run.receipt if result.total >= 100
# timeout: 30s

# Runs once for each row inserted into the orders table (serve --postgres). Its arguments are
# the change: the new row, the table, the operation, and where it sits in the WAL.


def main(table: str, op: str, row: dict, lsn: str, xid: int, commit_time: str, schema: str = "public", old=None):
    total = float(row["price"]) * row["qty"]
    return {"order": row["id"], "customer": row["customer"], "total": total, "placed_at": commit_time}
