"""vmpooler's embeddable core: the actor system that keeps pools of ready VMs."""
