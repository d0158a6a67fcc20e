package pgsource

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/jackc/pglogrepl"
)

// Type OIDs whose text Postgres sends maps onto a JSON value as it is.
const (
	oidBool   = 16
	oidInt8   = 20
	oidInt2   = 21
	oidInt4   = 23
	oidOID    = 26
	oidJSON   = 114
	oidFloat4 = 700
	oidFloat8 = 701
	oidJSONB  = 3802
)

// decodeTuple makes a row of tuple's columns. Booleans, integers and finite floats become JSON
// booleans and numbers, json and jsonb their JSON; every other type is Postgres's text of it
// (numeric, timestamps, uuid, arrays ...), which loses nothing. A TOASTed value the update did
// not change is not sent by Postgres and is left out. keysOnly keeps only the replica
// identity's columns.
func decodeTuple(rel *pglogrepl.RelationMessage, tuple *pglogrepl.TupleData, keysOnly bool) map[string]any {
	row := map[string]any{}
	for i, c := range tuple.Columns {
		if i >= len(rel.Columns) {
			break
		}
		col := rel.Columns[i]
		if keysOnly && col.Flags&1 == 0 {
			continue
		}
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			row[col.Name] = nil
		case pglogrepl.TupleDataTypeText:
			row[col.Name] = textValue(col.DataType, c.Data)
		case pglogrepl.TupleDataTypeBinary:
			row[col.Name] = c.Data // not asked for (proto_version 1 sends text); kept as base64
		}
	}
	return row
}

func textValue(oid uint32, data []byte) any {
	s := string(data)
	switch oid {
	case oidBool:
		return s == "t"
	case oidInt2, oidInt4, oidInt8, oidOID:
		return json.Number(s)
	case oidFloat4, oidFloat8:
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return json.Number(s)
		}
	case oidJSON, oidJSONB:
		if json.Valid(data) {
			return json.RawMessage(data)
		}
	}
	return s
}
