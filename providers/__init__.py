"""Provider plugins: the contract, the dummy provider and DNS plugins."""
