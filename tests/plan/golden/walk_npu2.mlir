module {
  aie.device(npu2) {
    %shim_0_0 = aie.tile(0, 0)
    %tile_0_2 = aie.tile(0, 2)
    %tile_0_3 = aie.tile(0, 3)
    aie.objectfifo @g0_in(%shim_0_0, {%tile_0_2}, 2 : i32) : !aie.objectfifo<memref<1xi32>>
    aie.objectfifo @g0_host(%tile_0_2, {%shim_0_0}, 2 : i32) : !aie.objectfifo<memref<2xi32>>
    aie.objectfifo @g0_out(%tile_0_2, {%tile_0_3}, 2 : i32) : !aie.objectfifo<memref<1xi32>>
    aie.objectfifo @emit_in(%shim_0_0, {%tile_0_3}, 2 : i32) : !aie.objectfifo<memref<7xi32>>
    aie.objectfifo @feedback(%tile_0_3, {%shim_0_0}, 2 : i32) : !aie.objectfifo<memref<8xi32>>
    func.func private @g0(memref<1xi32>, memref<2xi32>, memref<1xi32>) attributes {link_with = "g0.o"}
    func.func private @emit(memref<7xi32>, memref<1xi32>, memref<8xi32>) attributes {link_with = "emit.o"}
    %core_0_2 = aie.core(%tile_0_2) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %cmax = arith.constant 9223372036854775807 : index
      scf.for %launch = %c0 to %cmax step %c1 {
        %g0_in_view0 = aie.objectfifo.acquire @g0_in(Consume, 1) : !aie.objectfifosubview<memref<1xi32>>
        %g0_in_obj0 = aie.objectfifo.subview.access %g0_in_view0[0] : !aie.objectfifosubview<memref<1xi32>> -> memref<1xi32>
        %g0_host_view0 = aie.objectfifo.acquire @g0_host(Produce, 1) : !aie.objectfifosubview<memref<2xi32>>
        %g0_host_obj0 = aie.objectfifo.subview.access %g0_host_view0[0] : !aie.objectfifosubview<memref<2xi32>> -> memref<2xi32>
        %g0_out_view0 = aie.objectfifo.acquire @g0_out(Produce, 1) : !aie.objectfifosubview<memref<1xi32>>
        %g0_out_obj0 = aie.objectfifo.subview.access %g0_out_view0[0] : !aie.objectfifosubview<memref<1xi32>> -> memref<1xi32>
        func.call @g0(%g0_in_obj0, %g0_host_obj0, %g0_out_obj0) : (memref<1xi32>, memref<2xi32>, memref<1xi32>) -> ()
        aie.objectfifo.release @g0_in(Consume, 1)
        aie.objectfifo.release @g0_host(Produce, 1)
        aie.objectfifo.release @g0_out(Produce, 1)
      }
      aie.end
    } {stack_size = 1024 : i32}
    %core_0_3 = aie.core(%tile_0_3) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %cmax = arith.constant 9223372036854775807 : index
      scf.for %launch = %c0 to %cmax step %c1 {
        %emit_in_view0 = aie.objectfifo.acquire @emit_in(Consume, 1) : !aie.objectfifosubview<memref<7xi32>>
        %emit_in_obj0 = aie.objectfifo.subview.access %emit_in_view0[0] : !aie.objectfifosubview<memref<7xi32>> -> memref<7xi32>
        %g0_out_view0 = aie.objectfifo.acquire @g0_out(Consume, 1) : !aie.objectfifosubview<memref<1xi32>>
        %g0_out_obj0 = aie.objectfifo.subview.access %g0_out_view0[0] : !aie.objectfifosubview<memref<1xi32>> -> memref<1xi32>
        %feedback_view0 = aie.objectfifo.acquire @feedback(Produce, 1) : !aie.objectfifosubview<memref<8xi32>>
        %feedback_obj0 = aie.objectfifo.subview.access %feedback_view0[0] : !aie.objectfifosubview<memref<8xi32>> -> memref<8xi32>
        func.call @emit(%emit_in_obj0, %g0_out_obj0, %feedback_obj0) : (memref<7xi32>, memref<1xi32>, memref<8xi32>) -> ()
        aie.objectfifo.release @emit_in(Consume, 1)
        aie.objectfifo.release @g0_out(Consume, 1)
        aie.objectfifo.release @feedback(Produce, 1)
      }
      aie.end
    } {stack_size = 1024 : i32}
    aie.runtime_sequence @sequence(%arg0: memref<8xi32>, %arg1: memref<18xi32>, %arg2: memref<1xi32>, %arg3: memref<1xi32>, %arg4: memref<8xi32>, %arg5: memref<8xi32>) {
      // iron.patch dma=0 word=2
      aiex.npu.dma_memcpy_nd(%arg0[0, 0, 0, 0][1, 1, 1, 1][0, 0, 0, 1]) {id = 0 : i64, metadata = @g0_in} : memref<8xi32>
      aiex.npu.dma_memcpy_nd(%arg3[0, 0, 0, 0][1, 1, 1, 1][0, 0, 0, 1]) {id = 1 : i64, metadata = @g0_host} : memref<1xi32>
      // iron.patch dma=2 word=4
      aiex.npu.dma_memcpy_nd(%arg1[0, 0, 0, 0][1, 1, 1, 1][0, 0, 0, 1]) {id = 2 : i64, metadata = @g0_host} : memref<18xi32>
      aiex.npu.dma_memcpy_nd(%arg4[0, 0, 0, 0][1, 1, 1, 7][0, 0, 0, 1]) {id = 3 : i64, metadata = @emit_in} : memref<8xi32>
      aiex.npu.dma_memcpy_nd(%arg5[0, 0, 0, 0][1, 1, 1, 8][0, 0, 0, 1]) {id = 4 : i64, metadata = @feedback} : memref<8xi32>
      aiex.npu.dma_wait {symbol = @g0_host}
      aiex.npu.dma_wait {symbol = @feedback}
    }
  }
}
