// Package arch holds tests of the code's shape rather than its behaviour: no production file
// over 600 lines, no function over 100 (issue 38). The package has no code of its own.
//
//	go test -count=1 ./test/arch/
package arch
