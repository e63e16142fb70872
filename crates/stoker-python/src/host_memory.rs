//! Batches in CUDA's page-locked host memory: the torch adapter hands the engine the CUDA
//! runtime's allocation functions (of the runtime PyTorch loaded), and the engine's batch
//! pool takes its buffers from them, so that a copy to the device reads a batch where the
//! engine wrote it.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr::NonNull;
use std::sync::Arc;

use pyo3::prelude::*;
use stoker_core::storage::{set_batch_memory, HostMemory};

use stoker_core::Error;

use crate::errors::to_pyerr;

type SetDevice = unsafe extern "C" fn(c_int) -> c_int;
type HostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> c_int;
type FreeHost = unsafe extern "C" fn(*mut c_void) -> c_int;

/// `cudaHostAllocPortable`: page-locked for every CUDA context, not only the current one.
const PORTABLE: c_uint = 1;

/// `cudaSetDevice`, `cudaHostAlloc` and `cudaFreeHost` of one CUDA runtime.
#[derive(Debug)]
struct CudaHost {
    device: c_int,
    set_device: SetDevice,
    host_alloc: HostAlloc,
    free_host: FreeHost,
}

impl HostMemory for CudaHost {
    fn allocate(&self, len: usize) -> Option<NonNull<u8>> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: the functions are the CUDA runtime's (the caller of
        // `set_batch_host_memory` vouches for the addresses), called with their documented
        // arguments. The device is made current first, so that an engine thread works in the
        // context the training uses instead of creating one on device 0.
        let rc = unsafe {
            match (self.set_device)(self.device) {
                0 => (self.host_alloc)(&mut ptr, len, PORTABLE),
                err => err,
            }
        };
        if rc != 0 {
            return None;
        }
        NonNull::new(ptr.cast())
    }

    unsafe fn free(&self, ptr: NonNull<u8>, _len: usize) {
        // SAFETY: `ptr` came from `cudaHostAlloc` (the trait's contract); an error here
        // (the driver shutting down) leaves nothing to do.
        unsafe { (self.free_host)(ptr.as_ptr().cast()) };
    }
}

/// From now on, batches are written into page-locked memory from the CUDA runtime functions
/// at these addresses (`cudaSetDevice`, `cudaHostAlloc`, `cudaFreeHost`), made current on
/// `device`; with `None`, into heap memory again. Only `stoker.torch` calls this, with the
/// addresses it resolved in the CUDA runtime that PyTorch loaded: a wrong address crashes
/// the process.
#[pyfunction]
#[pyo3(signature = (functions, device=0))]
pub fn set_batch_host_memory(
    py: Python<'_>,
    functions: Option<(usize, usize, usize)>,
    device: i32,
) -> PyResult<()> {
    let Some((set_device, host_alloc, free_host)) = functions else {
        set_batch_memory(None);
        return Ok(());
    };
    if set_device == 0 || host_alloc == 0 || free_host == 0 {
        return Err(to_pyerr(
            py,
            Error::invalid("functions", "a function address is 0"),
        ));
    }
    // SAFETY: non-zero addresses of functions with these C signatures (the caller's
    // contract, above); a `usize` and a function pointer have the same size.
    let memory = unsafe {
        CudaHost {
            device,
            set_device: std::mem::transmute::<usize, SetDevice>(set_device),
            host_alloc: std::mem::transmute::<usize, HostAlloc>(host_alloc),
            free_host: std::mem::transmute::<usize, FreeHost>(free_host),
        }
    };
    set_batch_memory(Some(Arc::new(memory)));
    Ok(())
}
