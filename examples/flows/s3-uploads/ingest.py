# Runs once for each object created under incoming/ in the bucket uploads, and for each one
# removed there, from the S3 server's bucket notifications (docs/contract.md section 6).
# on: s3:uploads/incoming/ created,removed
# retries: 3


def main(bucket: str, key: str, size: int, etag: str, event: str):
    if event.startswith("ObjectRemoved:"):
        return {"removed": f"{bucket}/{key}"}
    return {"ingested": f"{bucket}/{key}", "bytes": size, "etag": etag}
