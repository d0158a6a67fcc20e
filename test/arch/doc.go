// Package arch holds tests of the code's shape rather than its behaviour: which packages may
// compile which (leaf_test.go), and no production file over 600 lines nor function over 100
// (size_test.go; issue 38). The package has no code of its own.
//
//	go test -count=1 ./test/arch/
package arch
