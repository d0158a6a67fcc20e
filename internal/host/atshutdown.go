package host

// AtShutdown has Shutdown call stop once the host's jobs have ended. The host's builder
// (package app) serves more than the engine on the host's connection (the secret
// administration, the webhook source watch); those stop when the host drains, not only when
// its connection closes.
func (h *Host) AtShutdown(stop func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.atShutdown = append(h.atShutdown, stop)
}

func (h *Host) runAtShutdown() {
	h.mu.Lock()
	stops := h.atShutdown
	h.atShutdown = nil
	h.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}
