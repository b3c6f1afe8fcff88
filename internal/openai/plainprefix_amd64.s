//go:build amd64 && !purego

#include "textflag.h"

// FLAGS reads the 32 bytes of b at offset AX into Y0, ORs them into Y3 and sets DX's
// low 32 bits where a byte equals a backslash (Y1) or is below 0x20: where
// min(byte, 0x1f) (Y2) equals it.
#define FLAGS \
	VMOVDQU   (SI)(AX*1), Y0; \
	VPOR      Y0, Y3, Y3; \
	VPCMPEQB  Y0, Y1, Y4; \
	VPMINUB   Y0, Y2, Y5; \
	VPCMPEQB  Y0, Y5, Y5; \
	VPOR      Y4, Y5, Y4; \
	VPMOVMSKB Y4, DX

// func plainPrefixAVX2(b []byte) (n int, high bool)
//
// The answer is the lowest flag of the first block with one. The last block is the last
// 32 bytes of b: the bytes it shares with the block before are plain, so its lowest
// flag is in bytes not read before. Only VEX-encoded instructions touch the vector
// registers (VMOVD, not MOVD): a legacy SSE instruction among them cost a call ~120 ns.
TEXT ·plainPrefixAVX2(SB), NOSPLIT, $0-33
	MOVQ         b_base+0(FP), SI
	MOVQ         b_len+8(FP), BX
	MOVL         $0x5c5c5c5c, DX
	VMOVD        DX, X1
	VPBROADCASTD X1, Y1
	MOVL         $0x1f1f1f1f, DX
	VMOVD        DX, X2
	VPBROADCASTD X2, Y2
	VPXOR        Y3, Y3, Y3
	MOVQ         BX, CX
	ANDQ         $~31, CX     // the bytes in whole blocks
	XORQ         AX, AX

loop:
	CMPQ  AX, CX
	JEQ   last
	FLAGS
	TESTL DX, DX
	JNZ   found
	ADDQ  $32, AX
	JMP   loop

last:
	CMPQ  AX, BX
	JEQ   done
	LEAQ  -32(BX), AX
	FLAGS
	TESTL DX, DX
	JNZ   found
	MOVQ  BX, AX
	JMP   done

found:
	BSFL DX, DX
	ADDQ DX, AX

done:
	MOVQ      AX, n+24(FP)
	VPMOVMSKB Y3, DX
	TESTL     DX, DX
	SETNE     high+32(FP)
	VZEROUPPER
	RET
