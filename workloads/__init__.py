"""Who arrives when with how many tokens: generators and trace loaders."""
