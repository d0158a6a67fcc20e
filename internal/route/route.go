// Package route decides where a step's result goes. A function's "next:" lines are edges:
// plain ones always fire, "if <expr>" ones when their condition holds (every one that holds:
// branch-all), "else" ones when no condition held, and "each <expr>" ones once per element of
// a list. The expressions are CEL (github.com/google/cel-go) over result (the step's result)
// and args (its arguments), compiled and type-checked when the function is loaded, so a typo
// is a load error at its line, not a surprise at the first run.
package route

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agenthost/host/internal/annot"
)

// MaxItems bounds the messages one "each" edge makes from one result: a map over more than
// this is a mistake (or an attack) better refused than published.
const MaxItems = 10_000

// costLimit bounds the work of one expression on one result, so that no payload can make the
// host spin; it is far above what any reasonable condition or list takes.
const costLimit = 10_000_000

// Table is a function's edges, compiled. The zero Table (or nil) routes nowhere.
type Table struct {
	edges []edge
	// exprs says some edge has an expression: only then is a result decoded to route it.
	exprs bool
}

type edge struct {
	annot.Next
	prg cel.Program // nil for a plain or else edge
}

// Message is one message a result is routed to. Count is the number of messages its "each"
// edge made from the result (0 for any other edge), Index its place among them, from 0.
type Message struct {
	Subject string
	Data    []byte
	Index   int
	Count   int
}

var env = func() *cel.Env {
	e, err := cel.NewEnv(
		cel.Variable("result", cel.DynType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		// JSON has one number type: 3 in a result must equal the 3 in an expression.
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		panic(fmt.Sprintf("route: the CEL environment: %v", err))
	}
	return e
}()

// Compile compiles the edges of a function whose script is file. Every expression that does
// not compile, or whose type cannot be a condition (if) or a list (each), is an *annot.Error
// at its line with CEL's message; they come joined.
func Compile(file string, next []annot.Next) (*Table, error) {
	t := &Table{}
	var errs []error
	for _, n := range next {
		e := edge{Next: n}
		expr, want, kind := n.If, "a condition (true or false)", types.BoolKind
		if n.Each != "" {
			expr, want, kind = n.Each, "a list", types.ListKind
		}
		if expr != "" {
			prg, err := compile(expr, kind)
			if err != nil {
				errs = append(errs, &annot.Error{File: file, Line: n.Line, Msg: fmt.Sprintf("next: %s %s %s: %v; the expression must be %s over result and args, e.g. result.severity == 'high' or result.files",
					n.Subject, word(n), expr, err, want)})
				continue
			}
			e.prg = prg
			t.exprs = true
		}
		t.edges = append(t.edges, e)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

func word(n annot.Next) string {
	if n.Each != "" {
		return "each"
	}
	return "if"
}

func compile(expr string, kind types.Kind) (cel.Program, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	// dyn is a type CEL cannot know before it sees a result (result.files); it is checked when
	// the expression runs.
	if got := ast.OutputType(); got.Kind() != kind && got.Kind() != types.DynKind {
		return nil, fmt.Errorf("it gives %s", got)
	}
	return env.Program(ast, cel.CostLimit(costLimit))
}

// Subjects are the subjects the edges publish to, in the order written, each once.
func (t *Table) Subjects() []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range t.edgesOrNil() {
		if !seen[e.Subject] {
			seen[e.Subject] = true
			out = append(out, e.Subject)
		}
	}
	return out
}

// Edges are the edges as written.
func (t *Table) Edges() []annot.Next {
	var out []annot.Next
	for _, e := range t.edgesOrNil() {
		out = append(out, e.Next)
	}
	return out
}

func (t *Table) edgesOrNil() []edge {
	if t == nil {
		return nil
	}
	return t.edges
}

// Route says which messages a result goes to, given the arguments the step ran with (a JSON
// object; empty is none). An expression that fails on them (a field the result lacks, a
// condition that is not true or false, a list too long) is an error naming the edge, the
// expression and what it got: the step fails, and nothing is routed.
func (t *Table) Route(result, args []byte) ([]Message, error) {
	edges := t.edgesOrNil()
	if len(edges) == 0 {
		return nil, nil
	}
	var vars map[string]any
	if t.exprs {
		var err error
		if vars, err = activation(result, args); err != nil {
			return nil, err
		}
	}
	var out []Message
	held := false
	for _, e := range edges {
		switch {
		case e.If != "":
			ok, err := e.holds(vars)
			if err != nil {
				return nil, err
			}
			if ok {
				held = true
				out = append(out, Message{Subject: e.Subject, Data: result})
			}
		case e.Each != "":
			items, err := e.items(vars)
			if err != nil {
				return nil, err
			}
			out = append(out, items...)
		case !e.Else:
			out = append(out, Message{Subject: e.Subject, Data: result})
		}
	}
	if !held {
		for _, e := range edges {
			if e.Else {
				out = append(out, Message{Subject: e.Subject, Data: result})
			}
		}
	}
	return out, nil
}

func activation(result, args []byte) (map[string]any, error) {
	var r any
	if len(result) > 0 {
		if err := json.Unmarshal(result, &r); err != nil {
			return nil, fmt.Errorf("route the result: it is not JSON: %w", err)
		}
	}
	a := map[string]any{}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil || a == nil {
			a = map[string]any{} // arguments that are no object are no arguments (the runner said so)
		}
	}
	return map[string]any{"result": r, "args": a}, nil
}

func (e *edge) eval(vars map[string]any) (ref.Val, error) {
	v, _, err := e.prg.Eval(vars)
	if err != nil {
		return nil, e.fail("%v", err)
	}
	return v, nil
}

func (e *edge) holds(vars map[string]any) (bool, error) {
	v, err := e.eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, e.fail("it gave %s %s, not true or false", v.Type().TypeName(), abbreviate(v))
	}
	return bool(b), nil
}

func (e *edge) items(vars map[string]any) ([]Message, error) {
	v, err := e.eval(vars)
	if err != nil {
		return nil, err
	}
	list, ok := v.(traits.Lister)
	if !ok {
		return nil, e.fail("it gave %s %s, not a list", v.Type().TypeName(), abbreviate(v))
	}
	n, _ := list.Size().(types.Int)
	if n > MaxItems {
		return nil, e.fail("it gave a list of %d items, more than the %d one step may map over; split the work, or pass a reference to a volume", n, MaxItems)
	}
	out := make([]Message, 0, int(n))
	for i := range int(n) {
		data, err := itemJSON(list.Get(types.Int(i)))
		if err != nil {
			return nil, e.fail("item %d: %v", i, err)
		}
		out = append(out, Message{Subject: e.Subject, Data: data, Index: i, Count: int(n)})
	}
	return out, nil
}

// itemJSON is the payload of one item: the object itself, or any other value as
// {"item": <value>} (a function's arguments are an object).
func itemJSON(v ref.Val) ([]byte, error) {
	native, err := v.ConvertToNative(reflect.TypeFor[*structpb.Value]())
	if err != nil {
		return nil, err
	}
	pv := native.(*structpb.Value)
	if _, isObject := pv.Kind.(*structpb.Value_StructValue); !isObject {
		pv = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"item": pv}})
	}
	b, err := protojson.Marshal(pv)
	if err != nil {
		return nil, err
	}
	// protojson's spacing is not stable; a payload is compared and stored as it is.
	var compact json.RawMessage
	if err := json.Unmarshal(b, &compact); err != nil {
		return nil, err
	}
	return json.Marshal(compact)
}

func (e *edge) fail(format string, args ...any) error {
	return fmt.Errorf("next: %s %s %s: %s", e.Subject, word(e.Next), exprOf(e.Next), fmt.Sprintf(format, args...))
}

func exprOf(n annot.Next) string {
	if n.Each != "" {
		return n.Each
	}
	return n.If
}

func abbreviate(v ref.Val) string {
	s := fmt.Sprint(v.Value())
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}
