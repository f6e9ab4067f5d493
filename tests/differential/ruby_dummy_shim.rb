# frozen_string_literal: true

# Loaded beside the Ruby vmpooler 3.9.1 manager (RUBYOPT="-r<this file>") so that its own
# dummy provider can fill a pool. Two gaps of the dummy provider in 3.9.1, nothing else:
#
# 1. The pool manager calls `provider.vm_ready?(pool, vm, redis)` (three arguments); the
#    dummy provider defines `vm_ready?(pool_name, vm_name)`, so every readiness check raises
#    ArgumentError and no VM ever becomes ready.
# 2. The clone asks `provider.get_vm_ip_address(vm, pool)`, which the dummy provider does not
#    implement (the base class raises), so every clone fails.
#
# Its `is_ready_timeout` default waits with sleeps; the dummy VM is RUNNING as soon as it is
# created, so readiness here takes the provider's fixed two seconds.
require 'vmpooler/providers/dummy'

module Vmpooler
  class PoolManager
    class Provider
      class Dummy
        alias_method :shim_vm_ready_two, :vm_ready?

        def vm_ready?(pool_name, vm_name, _redis = nil)
          shim_vm_ready_two(pool_name, vm_name)
        end

        def get_vm_ip_address(_vm_name, _pool_name)
          '127.0.0.1'
        end
      end
    end
  end
end
