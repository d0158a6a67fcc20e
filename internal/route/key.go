package route

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agenthost/host/internal/annot"
)

// MaxKeyBytes bounds the value a flow-control key gives: it names the key in the reason a
// waiting job's record shows, and a key built from a whole document is a mistake.
const MaxKeyBytes = 256

// Key is a flow-control expression over a message's arguments ("limit: 1 per args.repo"),
// compiled when the function loads. The zero Key (or nil) is the function's one key, "".
type Key struct {
	expr string
	what string // the annotation, for errors: "limit: 1 per"
	prg  cel.Program
}

// CompileKey compiles the expression of a "per" or "by" clause written at file:line after
// what (e.g. "limit: 1 per"). Any result type is a key; one that does not compile is an
// *annot.Error at its line with CEL's message.
func CompileKey(file string, line int, what, expr string) (*Key, error) {
	if expr == "" {
		return nil, nil
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, &annot.Error{File: file, Line: line, Msg: fmt.Sprintf("%s %s: %v; the expression is CEL over args, e.g. args.repo or args.org + '/' + args.repo",
			what, expr, iss.Err())}
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, &annot.Error{File: file, Line: line, Msg: fmt.Sprintf("%s %s: %v", what, expr, err)}
	}
	return &Key{expr: expr, what: what, prg: prg}, nil
}

// Eval is the key of a message whose arguments are args: the value as text (a string as it is,
// anything else as JSON). An expression that fails on them (a missing field) is an error naming
// it and what it got: the message fails with it.
func (k *Key) Eval(args []byte) (string, error) {
	if k == nil {
		return "", nil
	}
	vars, err := activation(nil, args)
	if err != nil {
		return "", err
	}
	v, _, err := k.prg.Eval(vars)
	if err != nil {
		return "", fmt.Errorf("%s %s: %v; the message's arguments must give it a value", k.what, k.expr, err)
	}
	var s string
	switch x := v.(type) {
	case types.String:
		s = string(x)
	case types.Int, types.Uint, types.Double, types.Bool:
		s = fmt.Sprint(x.Value())
	case types.Null:
		return "", fmt.Errorf("%s %s: it gave null; the message's arguments must give it a value", k.what, k.expr)
	default:
		native, err := v.ConvertToNative(reflect.TypeFor[*structpb.Value]())
		if err != nil {
			return "", fmt.Errorf("%s %s: it gave %s, which is no key", k.what, k.expr, v.Type().TypeName())
		}
		b, err := protojson.Marshal(native.(*structpb.Value))
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", k.what, k.expr, err)
		}
		var compact json.RawMessage // protojson's spacing is not stable
		if json.Unmarshal(b, &compact) == nil {
			b, _ = json.Marshal(compact)
		}
		s = string(b)
	}
	if len(s) > MaxKeyBytes {
		return "", fmt.Errorf("%s %s: it gave %d bytes, more than the %d a key may have; key on an identifier, not a document", k.what, k.expr, len(s), MaxKeyBytes)
	}
	return s, nil
}

// Label is how the key is named in a waiting job's reason: the expression without its
// "args." ("repo" for args.repo).
func (k *Key) Label() string {
	if k == nil {
		return ""
	}
	return strings.TrimPrefix(k.expr, "args.")
}
