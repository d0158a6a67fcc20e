package pgsource

// SetBeforeConfirm has the source run f once each transaction is stored, before it confirms it.
func (s *Source) SetBeforeConfirm(f func() error) { s.beforeConfirm = f }
