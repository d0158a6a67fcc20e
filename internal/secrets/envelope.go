package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
)

// envelope is the stored form of one secret. WrappedKey is the data key
// sealed with the host key, prefixed by that seal's nonce; Nonce and
// Ciphertext are the value sealed with the data key.
type envelope struct {
	V          int    `json:"v"`
	KEKID      string `json:"kek_id"`
	WrappedKey []byte `json:"wrapped_key"` // base64 (encoding/json's []byte form)
	Nonce      []byte `json:"nonce"`
	Ciphertext []byte `json:"ciphertext"`
}

const envelopeVersion = 1

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return aead, nil
}

func (s *Store) seal(name string, value []byte) ([]byte, error) {
	dek := make([]byte, KeySize)
	if _, err := rand.Read(dek); err != nil {
		return nil, fmt.Errorf("generate data key: %w", err)
	}
	dataAEAD, err := newGCM(dek)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, dataAEAD.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("generate nonce: %w", err)
	}
	aad := []byte(s.ns.aad + name)
	ct := dataAEAD.Seal(nil, nonce, value, aad)

	wrapNonce := make([]byte, s.kek.NonceSize())
	if _, err := rand.Read(wrapNonce); err != nil {
		return nil, fmt.Errorf("generate nonce: %w", err)
	}
	wrapped := s.kek.Seal(wrapNonce, wrapNonce, dek, aad)
	clear(dek)

	return json.Marshal(envelope{
		V:          envelopeVersion,
		KEKID:      s.kekID,
		WrappedKey: wrapped,
		Nonce:      nonce,
		Ciphertext: ct,
	})
}

func (s *Store) open(name string, blob []byte) (json.RawMessage, error) {
	var env envelope
	if err := json.Unmarshal(blob, &env); err != nil {
		return nil, fmt.Errorf("stored value is not a secrets envelope (corrupted, or written by something else): %w", err)
	}
	if env.V != envelopeVersion {
		return nil, fmt.Errorf("stored value has envelope version %d; this host reads version %d: upgrade the host", env.V, envelopeVersion)
	}
	if env.KEKID != s.kekID {
		return nil, fmt.Errorf("cannot decrypt: was this secret written with another host key? "+
			"it was sealed with kek_id %s, the loaded host key is kek_id %s: "+
			"use the host key it was written with, or set the secret again", env.KEKID, s.kekID)
	}
	ns := s.kek.NonceSize()
	if len(env.WrappedKey) < ns {
		return nil, errors.New("cannot decrypt: the wrapped data key is truncated (stored value corrupted or tampered with)")
	}
	aad := []byte(s.ns.aad + name)
	dek, err := s.kek.Open(nil, env.WrappedKey[:ns], env.WrappedKey[ns:], aad)
	if err != nil {
		return nil, errors.New("cannot decrypt: the data key fails authentication: " +
			"the stored value was tampered with, corrupted, or copied from another secret's name; set the secret again")
	}
	defer clear(dek)
	dataAEAD, err := newGCM(dek)
	if err != nil {
		return nil, err
	}
	if len(env.Nonce) != dataAEAD.NonceSize() {
		return nil, errors.New("cannot decrypt: bad nonce size (stored value corrupted or tampered with)")
	}
	v, err := dataAEAD.Open(nil, env.Nonce, env.Ciphertext, aad)
	if err != nil {
		return nil, errors.New("cannot decrypt: the value fails authentication: " +
			"the stored value was tampered with, corrupted, or copied from another secret's name; set the secret again")
	}
	return v, nil
}
